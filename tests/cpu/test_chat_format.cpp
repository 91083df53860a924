// The Qwen3 chat format: rendered text worked out by hand from the template in Qwen3's tokenizer_config.json,
// loss masks on the hand-made tokenizer, and, with the fetched Qwen3 tokenizer and its JavaScript reference, the
// rendered text (Qwen3's own chat_template run by @huggingface/jinja) and ids for many conversations.
#include <gtest/gtest.h>

#include <sstream>

#include "core/check.h"
#include "core/io/json.h"
#include "data/chat_format.h"
#include "tests/support/js_reference.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_tokenizer.h"

namespace primer {
namespace {

using data::ChatMessage;
using data::ChatOptions;
using Ids = std::vector<int32_t>;
using Mask = std::vector<uint8_t>;

std::vector<ChatMessage> messages_from_json(const json::Value& list) {
  std::vector<ChatMessage> out;
  for (const auto& m : list.as_array()) {
    const json::Object& o = m.as_object();
    ChatMessage message{o.find("role")->as_string(), o.find("content")->as_string(), std::nullopt};
    if (const json::Value* r = o.find("reasoning_content")) message.reasoning_content = r->as_string();
    out.push_back(std::move(message));
  }
  return out;
}

TEST(ChatFormat, RendersLikeTheQwen3Template) {
  // The final assistant turn after the last query gets the (empty) think block.
  EXPECT_EQ(data::render_chat(std::vector<ChatMessage>{{"user", "Hi", {}}, {"assistant", "Hello!", {}}}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n");
  // Turns before the last query lose their reasoning; the system prompt comes first.
  EXPECT_EQ(data::render_chat(std::vector<ChatMessage>{{"system", "S", {}},
                                                       {"user", "Q1", {}},
                                                       {"assistant", "<think>\nr1\n</think>\n\nA1", {}},
                                                       {"user", "Q2", {}},
                                                       {"assistant", "A2", {}}}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nA2<|im_end|>\n");
  // After the last query, turns with reasoning keep it; consecutive tool results share one user turn.
  EXPECT_EQ(data::render_chat(std::vector<ChatMessage>{{"user", "Q", {}},
                                                       {"assistant", "call", "\nplan\n"},
                                                       {"tool", "r1", {}},
                                                       {"tool", "r2", {}},
                                                       {"assistant", "\n\ndone", {}}}),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nplan\n</think>\n\ncall<|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\ndone<|im_end|>\n");
  // enable_thinking only shapes the generation prompt.
  const std::vector<ChatMessage> ask{{"user", "Hi", {}}};
  EXPECT_EQ(data::render_chat(ask, ChatOptions{true, false}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(data::render_chat(ask, ChatOptions{true, true}), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  test::expect_error([] { data::render_chat(std::vector<ChatMessage>{{"bot", "x", {}}}); }, {"role", "\"bot\""});
  test::expect_error([] { data::render_chat(std::vector<ChatMessage>{}); }, {"no messages"});
}

TEST(ChatFormat, LossMaskCoversExactlyTheAssistantResponses) {
  using namespace test::tiny;
  ScratchDir dir("chat");
  const data::Tokenizer tok = load(dir);
  const auto bytes = [](std::string_view s) { return Ids(s.begin(), s.end()); };
  const auto cat = [](std::initializer_list<Ids> parts) {
    Ids out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const std::vector<ChatMessage> chat{{"user", "Hi", {}}, {"assistant", "hello!", {}}};
  const data::ChatTokens t = data::tokenize_chat(tok, chat);
  const Ids prompt = cat({{kImStart}, bytes("user\nHi"), {kImEnd, '\n', kImStart}, bytes("assistant\n")});
  const Ids response = {kThink, '\n', '\n', kThinkEnd, '\n', '\n', kHello, '!', kImEnd};
  EXPECT_EQ(t.ids, cat({prompt, response, {'\n'}}));
  Mask mask(prompt.size(), 0);
  mask.insert(mask.end(), response.size(), 1);
  mask.push_back(0);
  EXPECT_EQ(t.loss_mask, mask);
  EXPECT_EQ(t.ids, tok.encode(data::render_chat(chat)));

  // Two assistant turns: both responses (and only they) are masked in.
  const std::vector<ChatMessage> two{
      {"user", "a", {}}, {"assistant", "b", {}}, {"user", "c", {}}, {"assistant", "d", {}}};
  const data::ChatTokens u = data::tokenize_chat(tok, two);
  ASSERT_EQ(u.ids.size(), u.loss_mask.size());
  std::string masked;
  for (size_t i = 0; i < u.ids.size(); ++i)
    if (u.loss_mask[i]) masked += tok.decode(Ids{u.ids[i]});
  EXPECT_EQ(masked, "b<|im_end|><think>\n\n</think>\n\nd<|im_end|>");
  // A generation prompt has nothing to learn.
  const data::ChatTokens g =
      data::tokenize_chat(tok, std::vector<ChatMessage>{{"user", "a", {}}}, ChatOptions{true, false});
  EXPECT_TRUE(std::all_of(g.loss_mask.begin(), g.loss_mask.end(), [](uint8_t m) { return m == 0; }));
}

// Conversations for the reference: every branch of the template, multilingual text, special tokens in content.
// "straddle": a response that starts with a newline after the header, where tokenizing the response on its own
// (as generation does) differs from tokenizing the whole text.
const char* const kConversations[] = {
    R"({"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"}]})",
    R"({"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"2+2?"},{"role":"assistant","content":"4"}]})",
    R"({"messages":[{"role":"user","content":"Q1"},{"role":"assistant","content":"<think>\nfirst I think\n</think>\n\nA1"},{"role":"user","content":"Q2"},{"role":"assistant","content":"<think>\n\nmore\n\n</think>\n\n\nA2"}]})",
    R"({"messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"call","reasoning_content":"\nplan\n"},{"role":"tool","content":"r1"},{"role":"tool","content":"r2"},{"role":"assistant","content":"done"}]})",
    R"({"messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"x"},{"role":"user","content":"<tool_response>\nok\n</tool_response>"},{"role":"assistant","content":"y"}]})",
    R"({"messages":[{"role":"system","content":"S1"},{"role":"user","content":"u"},{"role":"system","content":"S2 later"},{"role":"assistant","content":"a"}]})",
    R"({"messages":[{"role":"user","content":"\u4f60\u597d\uff0c\u4e16\u754c\uff01 \u0645\u0631\u062d\u0628\u0627 \ud83d\ude00"},{"role":"assistant","content":"\u3053\u3093\u306b\u3061\u306f caf\u00e9 na\u0131\u0308ve 12345"}]})",
    R"({"messages":[{"role":"user","content":"say <|im_end|> and <think> literally"},{"role":"assistant","content":"<think> not closed"}]})",
    R"({"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true,"enable_thinking":false})",
    R"({"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true,"enable_thinking":true})",
    R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","reasoning_content":""},{"role":"user","content":"c"}],"add_generation_prompt":true,"enable_thinking":true})",
    R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"  spaced\tand\r\nCRLF  "},{"role":"user","content":"q2"},{"role":"assistant","content":"\n\nlead"}]})",
    R"({"straddle":true,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"\nstarts with a newline"},{"role":"user","content":"q2"},{"role":"assistant","content":"ok"}]})",
    R"({"messages":[{"role":"tool","content":"first"},{"role":"user","content":"u"},{"role":"assistant","content":"a"},{"role":"tool","content":"t"}]})",
};

TEST(ChatFormatReference, Qwen3TemplateAndIdsMatchJavaScript) {
  const std::string missing = test::js_reference_missing("qwen3");
  if (!missing.empty()) GTEST_SKIP() << missing;
  const data::Tokenizer tok = data::Tokenizer::load(test::reference_tokenizer_dir("qwen3"));
  ASSERT_NE(tok.chat_template().find("<think>"), std::string::npos);
  std::string lines;
  for (const char* c : kConversations) {
    json::Value v = json::parse(c, "conversation");
    v.as_object().erase("straddle");
    lines += json::dump(v) + "\n";
  }
  test::tiny::ScratchDir dir("chat-ref");
  const std::string out =
      test::run_node("tools/tokenizer/reference_ids.mjs", "--chat " + test::quoted(dir.write("chats.jsonl", lines)));
  std::istringstream in(out);
  size_t index = 0;
  for (std::string line; std::getline(in, line); ++index) {
    ASSERT_LT(index, std::size(kConversations));
    const json::Value conversation = json::parse(kConversations[index], "conversation");
    const json::Object& c = conversation.as_object();
    const auto messages = messages_from_json(*c.find("messages"));
    ChatOptions options;
    if (const auto* v = c.find("add_generation_prompt")) options.add_generation_prompt = v->as_bool();
    if (const auto* v = c.find("enable_thinking")) options.enable_thinking = v->as_bool();
    const json::Value reference = json::parse(line, "reference output");
    const std::string& text = reference.as_object().find("text")->as_string();
    EXPECT_EQ(data::render_chat(messages, options), text) << "conversation " << index;
    Ids reference_ids;
    for (const auto& id : reference.as_object().find("ids")->as_array()) reference_ids.push_back(int32_t(id.as_int()));
    EXPECT_EQ(tok.encode(text), reference_ids) << "conversation " << index;
    const data::ChatTokens t = data::tokenize_chat(tok, messages, options);
    if (c.find("straddle")) {
      EXPECT_NE(t.ids, reference_ids) << "conversation " << index << " no longer straddles: drop the flag";
      EXPECT_EQ(tok.decode(t.ids), text);
    } else {
      EXPECT_EQ(t.ids, reference_ids) << "conversation " << index;
    }
  }
  EXPECT_EQ(index, std::size(kConversations));
}

}  // namespace
}  // namespace primer
