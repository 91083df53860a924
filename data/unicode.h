// The Unicode the tokenizer needs: strict UTF-8 decoding that never fails (an ill-formed byte stands for
// itself), the character classes of the pre-tokenizer regexes, NFC normalization and lossy UTF-8 repair for
// decoding. Tables come from data/unicode_tables.h (Unicode version: unicode::version()).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace primer::data::unicode {

// The classes the pre-tokenizer regexes distinguish: \p{L}, \p{N}, \s (JavaScript's definition) and the rest.
enum class CharClass : uint8_t { Other = 0, Letter = 1, Number = 2, Space = 3 };

// One unit of UTF-8 text: a well-formed sequence (valid, 1-4 bytes, cp its code point) or a maximal subpart of
// an ill-formed one (not valid, 1-3 bytes, cp the first byte): the longest start of a well-formed sequence, or
// one byte, which is what one U+FFFD replaces in lossy decoding. Well-formed follows Unicode's Table 3-7: no
// overlongs, no surrogates, nothing above U+10FFFF.
struct Unit {
  char32_t cp;
  uint8_t length;
  bool valid;
};
// Requires n >= 1.
inline Unit decode(const unsigned char* s, size_t n);

// Properties of a code point, packed: the combining class rank (0 for starters), the class, and whether the
// code point may change under NFC or combine with what precedes it (not NFC_Quick_Check = Yes with class 0).
struct Properties {
  static constexpr uint16_t kRankMask = 0xff, kClassShift = 8, kNfcCheck = 1u << 10;
  const uint16_t* block_of;  // [0x110000 >> 8] → first entry of that block in `entries`
  const uint16_t* entries;
  uint16_t get(char32_t cp) const { return entries[(size_t(block_of[cp >> 8]) << 8) | (cp & 0xff)]; }
};
const Properties& properties();

inline CharClass char_class(char32_t cp) { return CharClass((properties().get(cp) >> Properties::kClassShift) & 3); }
inline bool needs_nfc_check(char32_t cp) { return properties().get(cp) & Properties::kNfcCheck; }

const char* version();

// NFC of `text`. Returns false and leaves `out` untouched when the text is already NFC (the common case, decided
// by a quick check), else writes the normalized text to `out`. Ill-formed bytes pass through and block
// composition, like any character of combining class 0 that composes with nothing.
bool nfc(std::string_view text, std::string& out);

// `bytes` with every ill-formed sequence replaced by U+FFFD, one per maximal subpart (Unicode's recommended
// practice, as Rust's String::from_utf8_lossy and the WHATWG TextDecoder do).
std::string to_valid_utf8(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);
// The offset of the first ill-formed sequence; npos for valid UTF-8.
size_t first_invalid_utf8(std::string_view bytes);

void append_utf8(char32_t cp, std::string& out);

inline Unit decode(const unsigned char* s, size_t n) {
  const unsigned lead = s[0];
  if (lead < 0x80) return {lead, 1, true};
  // The second byte's range depends on the lead (Table 3-7); later bytes are 80..BF.
  unsigned need, lo = 0x80, hi = 0xbf;
  char32_t cp;
  if (lead >= 0xc2 && lead <= 0xdf) {
    need = 1, cp = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    need = 2, cp = lead & 0x0f;
    if (lead == 0xe0) lo = 0xa0;
    if (lead == 0xed) hi = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    need = 3, cp = lead & 0x07;
    if (lead == 0xf0) lo = 0x90;
    if (lead == 0xf4) hi = 0x8f;
  } else {
    return {lead, 1, false};
  }
  for (unsigned i = 1; i <= need; ++i) {
    if (i == n || s[i] < lo || s[i] > hi) return {lead, uint8_t(i), false};
    const unsigned b = s[i];
    lo = 0x80, hi = 0xbf;
    cp = (cp << 6) | (b & 0x3f);
  }
  return {cp, uint8_t(need + 1), true};
}

}  // namespace primer::data::unicode
