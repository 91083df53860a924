#include "data/chat_format.h"

#include <string_view>

#include "core/check.h"

namespace primer::data {

namespace {

// Python's str.lstrip/rstrip/strip with "\n" as the characters to strip.
std::string_view lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

bool is_tool_response(std::string_view content) {
  return content.starts_with("<tool_response>") && content.ends_with("</tool_response>");
}

// A piece of the rendered conversation and whether the loss is taken on it.
struct Segment {
  std::string text;
  bool response;
};

// The assistant's response (what follows "<|im_start|>assistant\n", before "<|im_end|>"), as the template builds it.
std::string assistant_response(const ChatMessage& m, bool after_last_query, bool is_last) {
  std::string_view content = m.content, reasoning;
  if (m.reasoning_content) {
    reasoning = *m.reasoning_content;
  } else if (const size_t close = content.find("</think>"); close != std::string_view::npos) {
    // content.split('</think>')[-1].lstrip('\n') and content.split('</think>')[0].rstrip('\n').split('<think>')[-1]
    // .lstrip('\n')
    const std::string_view all = m.content;
    content = lstrip_newlines(all.substr(all.rfind("</think>") + 8));
    const std::string_view before = rstrip_newlines(all.substr(0, close));
    const size_t open = before.rfind("<think>");
    reasoning = lstrip_newlines(open == std::string_view::npos ? before : before.substr(open + 7));
  }
  if (after_last_query && (is_last || !reasoning.empty()))
    return "<think>\n" + std::string(rstrip_newlines(lstrip_newlines(reasoning))) + "\n</think>\n\n" +
           std::string(lstrip_newlines(content));
  return std::string(content);
}

std::vector<Segment> render_segments(std::span<const ChatMessage> messages, const ChatOptions& options) {
  PRIMER_CHECK(!messages.empty(), "chat format: no messages");
  const size_t n = messages.size();
  // The last user message that is not a tool response wrapped as a user turn.
  size_t last_query = n - 1;
  for (size_t k = n; k-- > 0;) {
    if (messages[k].role == "user" && !is_tool_response(messages[k].content)) {
      last_query = k;
      break;
    }
  }
  std::vector<Segment> segments;
  std::string prompt;  // prompt text since the last response
  const auto flush_prompt = [&] {
    if (!prompt.empty()) segments.push_back({std::move(prompt), false});
    prompt.clear();
  };
  for (size_t i = 0; i < n; ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system" || m.role == "user") {
      prompt += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      prompt += "<|im_start|>assistant\n";
      flush_prompt();
      segments.push_back({assistant_response(m, i > last_query, i + 1 == n) + "<|im_end|>", true});
      prompt += "\n";
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") prompt += "<|im_start|>user";
      prompt += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == n || messages[i + 1].role != "tool") prompt += "<|im_end|>\n";
    } else {
      PRIMER_FAIL("chat format: message {} has role \"{}\" (expected system, user, assistant or tool)", i, m.role);
    }
  }
  if (options.add_generation_prompt) {
    prompt += "<|im_start|>assistant\n";
    if (!options.enable_thinking) prompt += "<think>\n\n</think>\n\n";
  }
  flush_prompt();
  return segments;
}

}  // namespace

std::string render_chat(std::span<const ChatMessage> messages, const ChatOptions& options) {
  std::string text;
  for (const auto& s : render_segments(messages, options)) text += s.text;
  return text;
}

ChatTokens tokenize_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                         const ChatOptions& options) {
  ChatTokens out;
  for (const auto& s : render_segments(messages, options)) {
    const auto ids = tokenizer.encode(s.text);
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.loss_mask.insert(out.loss_mask.end(), ids.size(), s.response ? 1 : 0);
  }
  return out;
}

}  // namespace primer::data
