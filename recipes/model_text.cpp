#include "recipes/model_text.h"

#include "core/check.h"
#include "data/chat_format.h"

namespace primer::recipes {

ModelText::ModelText(const std::string& tokenizer_dir, int64_t vocab_size) : source_(tokenizer_dir) {
  if (tokenizer_dir.empty()) {
    PRIMER_CHECK(vocab_size == 256,
                 "the model has no tokenizer (no tokenizer.json beside it; pass --tokenizer) and a vocabulary of {}, "
                 "so it does not read bytes (a vocabulary of 256)",
                 vocab_size);
    return;
  }
  tokenizer_ = data::Tokenizer::load(tokenizer_dir);
  PRIMER_CHECK(tokenizer_->vocab_size() <= vocab_size,
               "the tokenizer of '{}' has {} ids, more than the model's vocabulary of {}", tokenizer_dir,
               tokenizer_->vocab_size(), vocab_size);
}

std::vector<int32_t> ModelText::encode(std::string_view text) const {
  if (tokenizer_) return tokenizer_->encode(text);
  return std::vector<int32_t>(reinterpret_cast<const uint8_t*>(text.data()),
                              reinterpret_cast<const uint8_t*>(text.data()) + text.size());
}

std::string ModelText::decode(std::span<const int32_t> ids) const {
  if (tokenizer_) return tokenizer_->decode(ids);
  std::string out;
  for (const int32_t id : ids) out.push_back(char(uint8_t(id)));
  return out;
}

std::vector<int32_t> ModelText::end_ids(bool chat) const {
  if (!tokenizer_) return {};
  std::vector<int32_t> ids{tokenizer_->eos_id()};
  if (chat)
    if (const auto im_end = tokenizer_->token_id("<|im_end|>"); im_end && *im_end != ids.front())
      ids.push_back(*im_end);
  return ids;
}

std::string ModelText::chat_prompt(const std::string& user) const {
  const data::ChatMessage message{"user", user, std::nullopt};
  return data::render_chat({&message, 1}, {.add_generation_prompt = true, .enable_thinking = false});
}

std::string ModelText::describe() const { return tokenizer_ ? "tokenizer " + source_ : "bytes as tokens"; }

}  // namespace primer::recipes
