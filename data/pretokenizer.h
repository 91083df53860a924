// The pre-tokenizer of the Qwen2/Qwen3 and Llama-3 tokenizers: a hand-written scanner equivalent to their
// Split regex (behaviour "Isolated"), for Qwen2
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// and for Llama-3 the same with \p{N}{1,3}. Each alternative is tried in order with the regex's backtracking
// semantics, as the reference (JavaScript RegExp with the `u` flag) does: \s is JavaScript's, the contractions are
// ASCII-case-insensitive. An ill-formed UTF-8 subpart counts as one character of none of the classes.
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>

namespace primer::data {

enum class SplitPattern { Qwen2, Llama3 };

// The pattern whose regex source is exactly `regex` (as tokenizer.json writes it), or nullopt.
std::optional<SplitPattern> recognize_split_pattern(std::string_view regex);

class Pretokenizer {
 public:
  explicit Pretokenizer(SplitPattern pattern) : max_digits_(pattern == SplitPattern::Llama3 ? 3 : 1) {}
  // Splits the text from `pos` into consecutive pieces, writing where each ends to `ends` until it is full or the
  // text ends; returns how many were written. Pieces tile the text.
  size_t split(std::string_view text, size_t pos, std::span<size_t> ends) const;

 private:
  size_t piece_end(std::string_view text, size_t pos) const;  // the end of the piece at pos < text.size()
  size_t max_digits_;                                         // \p{N} (1) or \p{N}{1,3}
};

}  // namespace primer::data
