// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (the Qwen2/Qwen3 and Llama-3 families):
// normalizer (if any), pre-tokenization regex with Unicode classes, byte-to-unicode mapping, ranked merges and
// added/special tokens. Encodes to and decodes from the same ids as Hugging Face `tokenizers`.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace primer::data {

class Tokenizer {
 public:
  // Reads <dir>/tokenizer.json, or the file itself when `path` names a .json file, plus tokenizer_config.json
  // beside it when present (eos token, chat template). Errors name the file and the key at fault.
  static Tokenizer load(const std::string& path);

  // Special/added tokens in `text` (e.g. "<|im_start|>") become their ids when allow_special, else they are
  // encoded as plain text. Invalid UTF-8 is encoded byte by byte, never rejected.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  std::string decode(std::span<const int32_t> ids) const;

  int64_t vocab_size() const;                                // largest id + 1, added tokens included
  std::optional<int32_t> token_id(std::string_view token) const;  // a vocabulary or added token
  int32_t eos_id() const;  // tokenizer_config.json's eos_token, else <|endoftext|> or </s>; errors if none
  // Pimpl so that the merge tables and regex machinery stay out of every includer.
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace primer::data
