#include "data/pretokenizer.h"

#include <array>

#include "data/unicode.h"

namespace primer::data {

using unicode::CharClass;

std::optional<SplitPattern> recognize_split_pattern(std::string_view regex) {
  static constexpr std::string_view kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (regex == kQwen2) return SplitPattern::Qwen2;
  if (regex == kLlama3) return SplitPattern::Llama3;
  return std::nullopt;
}

namespace {

// A character of the text: its length in bytes and its class (ill-formed subparts are Other).
struct Char {
  size_t length;
  CharClass cls;
};

// ASCII classes by table (filled from the Unicode tables); the rest through the Unicode properties.
const std::array<CharClass, 128> kAsciiClass = [] {
  std::array<CharClass, 128> t{};
  for (char32_t c = 0; c < 128; ++c) t[c] = unicode::char_class(c);
  return t;
}();

inline Char char_at(const unsigned char* s, size_t n, size_t pos) {
  if (s[pos] < 0x80) return {1, kAsciiClass[s[pos]]};
  const unicode::Unit u = unicode::decode(s + pos, n - pos);
  return {u.length, u.valid ? unicode::char_class(u.cp) : CharClass::Other};
}

inline bool is_cr_or_lf(unsigned char c) { return c == '\r' || c == '\n'; }

// The end of the run of characters of class `cls` starting at pos.
inline size_t run_end(const unsigned char* s, size_t n, size_t pos, CharClass cls) {
  while (pos < n) {
    const Char c = char_at(s, n, pos);
    if (c.cls != cls) break;
    pos += c.length;
  }
  return pos;
}

inline unsigned char ascii_lower(unsigned char c) { return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c; }

}  // namespace

inline size_t Pretokenizer::piece_end(std::string_view text, size_t p) const {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (s[p] == '\'' && p + 1 < n) {
    const unsigned char a = ascii_lower(s[p + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return p + 2;
    if (p + 2 < n) {
      const unsigned char b = ascii_lower(s[p + 2]);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return p + 3;
    }
  }

  // [^\r\n\p{L}\p{N}]?\p{L}+
  const Char c0 = char_at(s, n, p);
  if (c0.cls == CharClass::Letter) return run_end(s, n, p, CharClass::Letter);
  if (c0.cls != CharClass::Number && !is_cr_or_lf(s[p])) {
    const size_t q = p + c0.length;
    if (q < n && char_at(s, n, q).cls == CharClass::Letter) return run_end(s, n, q, CharClass::Letter);
  }

  // \p{N} or \p{N}{1,3}
  if (c0.cls == CharClass::Number) {
    size_t q = p + c0.length;
    for (size_t k = 1; k < max_digits_ && q < n; ++k) {
      const Char c = char_at(s, n, q);
      if (c.cls != CharClass::Number) break;
      q += c.length;
    }
    return q;
  }

  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  {
    const size_t q = s[p] == ' ' ? p + 1 : p;
    if (q < n && char_at(s, n, q).cls == CharClass::Other) {
      size_t r = run_end(s, n, q, CharClass::Other);
      while (r < n && is_cr_or_lf(s[r])) ++r;
      return r;
    }
  }

  // Only whitespace is left: \s*[\r\n]+ takes the run through its last CR or LF; else \s+(?!\S) takes the run
  // less its last character when something follows, and \s+ a lone character.
  size_t end = p, last_start = p, after_newline = 0;
  while (end < n) {
    const Char c = char_at(s, n, end);
    if (c.cls != CharClass::Space) break;
    if (is_cr_or_lf(s[end])) after_newline = end + 1;
    last_start = end;
    end += c.length;
  }
  if (after_newline != 0) return after_newline;
  if (end == n || last_start == p) return end;
  return last_start;
}

size_t Pretokenizer::split(std::string_view text, size_t pos, std::span<size_t> ends) const {
  size_t count = 0;
  while (pos < text.size() && count < ends.size()) pos = ends[count++] = piece_end(text, pos);
  return count;
}

}  // namespace primer::data
