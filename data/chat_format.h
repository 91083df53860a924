// Chat formatting for supervised fine-tuning: Qwen3's chat template (ChatML with think blocks, the
// chat_template of Qwen3's tokenizer_config.json, without tool definitions) rendered from messages, tokenized,
// with a loss mask that is 1 exactly on what the assistant writes.
//
// What the template renders, per message:
//   system (first only)   <|im_start|>system\n{content}<|im_end|>\n
//   user, later system    <|im_start|>{role}\n{content}<|im_end|>\n
//   tool (consecutive ones share one user turn)
//                         <|im_start|>user\n<tool_response>\n{content}\n</tool_response>...<|im_end|>\n
//   assistant             <|im_start|>assistant\n{response}<|im_end|>\n
// where {response} is the content alone for turns before the last user query, and for turns after it that are
// the last message or carry reasoning: <think>\n{reasoning}\n</think>\n\n{content}. So the final assistant turn of
// an SFT example without reasoning gets the empty block <think>\n\n</think>\n\n, Qwen3's non-thinking form.
// Reasoning comes from reasoning_content, or from a "<think>...</think>" prefix of the content (as the template
// splits it). enable_thinking only matters with add_generation_prompt, as in the template: false appends the
// empty think block to the generation prompt.
//
// Loss mask: 1 on {response}<|im_end|> of every assistant turn (the think block, empty or not, included: Qwen3
// trains its non-thinking responses with the empty block), 0 on everything else: system/user/tool turns, the
// "<|im_start|>assistant\n" header and the "\n" after <|im_end|>. Each masked span is tokenized on its own, as at
// generation time the response starts after the tokenized prompt; the ids equal encoding the whole rendered text
// except where a response starts with whitespace that would merge with the header's "\n".
// Content is encoded with special tokens recognised, as Hugging Face's apply_chat_template(tokenize=True) does.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace primer::data {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  std::optional<std::string> reasoning_content;  // an assistant's thinking, when given apart from content
};

struct ChatOptions {
  bool add_generation_prompt = false;  // end with "<|im_start|>assistant\n" (prompting, not training)
  bool enable_thinking = true;         // false: the generation prompt also gets the empty think block
};

struct ChatTokens {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss_mask;  // same length as ids
};

// The rendered conversation as text (errors on an unknown role or no messages).
std::string render_chat(std::span<const ChatMessage> messages, const ChatOptions& options = {});

// Rendered and tokenized with the loss mask.
ChatTokens tokenize_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                         const ChatOptions& options = {});

}  // namespace primer::data
