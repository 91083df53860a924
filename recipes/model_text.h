// Text in and out of a model: its byte-level BPE tokenizer (tokenizer.json), or bytes as tokens for a byte-level
// model (vocabulary 256, as primer's `dataset:` runs train) when it has none.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace primer::recipes {

class ModelText {
 public:
  // The tokenizer in `tokenizer_dir` (a directory or a tokenizer.json), or bytes when it is empty; errors when
  // neither fits a model of `vocab_size` ids.
  ModelText(const std::string& tokenizer_dir, int64_t vocab_size);

  // Special tokens (e.g. <|im_start|>) become their ids.
  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const;
  // The tokens that end a generation: the tokenizer's end of sequence and, for chat, Qwen3's <|im_end|> (none for
  // bytes).
  std::vector<int32_t> end_ids(bool chat) const;
  // A user message in Qwen3's chat format, ending in the assistant's generation prompt (without thinking).
  std::string chat_prompt(const std::string& user) const;
  bool bytes() const { return !tokenizer_; }
  std::string describe() const;  // for the log

 private:
  std::optional<data::Tokenizer> tokenizer_;
  std::string source_;
};

}  // namespace primer::recipes
