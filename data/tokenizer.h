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
  // (allow_special = false is Hugging Face's split_special_tokens: only tokens marked "special" are then
  // plain text; the other added tokens, e.g. Qwen3's <think>, are still matched.) No BOS/EOS is added.
  // Thread-safe: many threads may encode with one Tokenizer (the word cache is per thread).
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // The UTF-8 text of `ids`; byte sequences that are not valid UTF-8 become U+FFFD (one per maximal subpart,
  // as Hugging Face's decoder does). Special tokens are kept; an id outside the vocabulary is an error.
  std::string decode(std::span<const int32_t> ids) const;

  int64_t vocab_size() const;                                     // largest id + 1, added tokens included
  std::optional<int32_t> token_id(std::string_view token) const;  // a vocabulary token (as written in
                                                                  // tokenizer.json, e.g. "Ġthe") or added token
  // tokenizer_config.json's eos_token, else <|endoftext|>, <|end_of_text|> or </s>; errors if none.
  int32_t eos_id() const;
  std::optional<int32_t> bos_id() const;     // tokenizer_config.json's bos_token, if any (Llama-3; not Qwen3)
  const std::string& chat_template() const;  // tokenizer_config.json's chat_template, empty if none
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
