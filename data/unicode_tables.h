// Unicode data for the tokenizer, generated into data/unicode_tables.cpp by tools/tokenizer/gen_unicode_tables.mjs
// from Node.js's Unicode support (the version is kUnicodeVersion), so that the pre-tokenizer classes and NFC
// agree with the JavaScript reference implementation. data/unicode.h turns them into fast lookups.
#pragma once
#include <cstddef>
#include <cstdint>

namespace primer::data::unicode_tables {

struct CodeRange {
  char32_t first, last;  // inclusive
};
struct CombiningRank {
  char32_t cp;
  uint8_t rank;  // order of the canonical combining class among non-zero classes (1 = lowest); 0 is never stored
};
struct Decomposition {
  char32_t cp;
  uint16_t offset;  // into kDecompositionData
  uint8_t length;   // the full canonical decomposition (NFD of the code point), Hangul syllables excluded
};
struct Composition {
  char32_t first, second, composite;  // primary composites (not excluded from NFC), Hangul excluded
};

extern const char* const kUnicodeVersion;
extern const CodeRange kLetters[];  // \p{L}
extern const size_t kLetters_size;
extern const CodeRange kNumbers[];  // \p{N}
extern const size_t kNumbers_size;
extern const CodeRange kSpaces[];  // \s as JavaScript defines it (White_Space less U+0085, plus U+FEFF)
extern const size_t kSpaces_size;
extern const CombiningRank kCombiningRanks[];  // sorted by code point
extern const size_t kCombiningRanks_size;
extern const Decomposition kDecompositions[];  // sorted by code point
extern const size_t kDecompositions_size;
extern const char32_t kDecompositionData[];
extern const size_t kDecompositionData_size;
extern const Composition kCompositions[];
extern const size_t kCompositions_size;

}  // namespace primer::data::unicode_tables
