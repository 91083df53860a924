#include "data/unicode.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "data/unicode_tables.h"

namespace primer::data::unicode {

namespace ut = unicode_tables;

namespace {

constexpr char32_t kCodeSpace = 0x110000;

// Hangul syllables compose and decompose arithmetically (Unicode §3.12).
constexpr char32_t kSBase = 0xac00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11a7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

struct Tables {
  std::vector<uint16_t> block_of, entries;
  Properties properties;
  std::unordered_map<uint64_t, char32_t> composite_of;  // (first << 21 | second) → primary composite
};

Tables build_tables() {
  std::vector<uint16_t> flat(kCodeSpace, 0);
  const auto mark_class = [&](const ut::CodeRange* ranges, size_t n, CharClass c) {
    for (size_t i = 0; i < n; ++i)
      for (char32_t cp = ranges[i].first; cp <= ranges[i].last; ++cp)
        flat[cp] |= uint16_t(uint16_t(c) << Properties::kClassShift);
  };
  mark_class(ut::kLetters, ut::kLetters_size, CharClass::Letter);
  mark_class(ut::kNumbers, ut::kNumbers_size, CharClass::Number);
  mark_class(ut::kSpaces, ut::kSpaces_size, CharClass::Space);

  Tables t;
  for (size_t i = 0; i < ut::kCombiningRanks_size; ++i)
    flat[ut::kCombiningRanks[i].cp] |= ut::kCombiningRanks[i].rank | Properties::kNfcCheck;
  // Characters that combine with what precedes them (NFC_Quick_Check = Maybe) ...
  for (size_t i = 0; i < ut::kCompositions_size; ++i) {
    const auto& c = ut::kCompositions[i];
    flat[c.second] |= Properties::kNfcCheck;
    t.composite_of.emplace(uint64_t(c.first) << 21 | c.second, c.composite);
  }
  for (char32_t cp = kVBase; cp < kVBase + kVCount; ++cp) flat[cp] |= Properties::kNfcCheck;
  for (char32_t cp = kTBase + 1; cp < kTBase + kTCount; ++cp) flat[cp] |= Properties::kNfcCheck;
  // ... and those that never survive NFC (decompose, but are no primary composite: NFC_Quick_Check = No).
  for (size_t i = 0; i < ut::kDecompositions_size; ++i) {
    const char32_t cp = ut::kDecompositions[i].cp;
    const bool primary = std::any_of(ut::kCompositions, ut::kCompositions + ut::kCompositions_size,
                                     [&](const ut::Composition& c) { return c.composite == cp; });
    if (!primary) flat[cp] |= Properties::kNfcCheck;
  }
  // ... and composites whose decomposition begins with a character that combines backward: U+16121 is
  // U+1611E U+1611E, so U+1611E U+16121 recomposes to U+16121 U+1611E (Unicode 16's Gurung Khema, Kirat Rai, ...).
  // Such a character is no safe boundary although it is NFC_Quick_Check = Yes (ICU: no boundary before it).
  for (size_t i = 0; i < ut::kDecompositions_size; ++i) {
    const ut::Decomposition& d = ut::kDecompositions[i];
    if (flat[ut::kDecompositionData[d.offset]] & Properties::kNfcCheck) flat[d.cp] |= Properties::kNfcCheck;
  }

  // Two stages: identical 256-code-point blocks are stored once.
  t.block_of.resize(kCodeSpace >> 8);
  std::unordered_map<std::string_view, uint16_t> seen;
  for (size_t b = 0; b < t.block_of.size(); ++b) {
    const std::string_view key(reinterpret_cast<const char*>(&flat[b << 8]), 256 * sizeof(uint16_t));
    auto [it, fresh] = seen.emplace(key, uint16_t(t.entries.size() >> 8));
    if (fresh)
      t.entries.insert(t.entries.end(), flat.begin() + std::ptrdiff_t(b << 8),
                       flat.begin() + std::ptrdiff_t((b + 1) << 8));
    t.block_of[b] = it->second;
  }
  t.properties = {t.block_of.data(), t.entries.data()};
  return t;
}

const Tables& tables() {
  static const Tables t = build_tables();
  return t;
}

uint8_t rank_of(char32_t cp) { return cp < kCodeSpace ? properties().get(cp) & Properties::kRankMask : 0; }

// Ill-formed bytes travel through normalization as these values: class 0, no decomposition, no composition.
constexpr char32_t kRawByte = kCodeSpace;

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = ut::kDecompositions + ut::kDecompositions_size;
  const auto* it =
      std::lower_bound(ut::kDecompositions, end, cp, [](const ut::Decomposition& d, char32_t c) { return d.cp < c; });
  if (it != end && it->cp == cp)
    out.insert(out.end(), ut::kDecompositionData + it->offset, ut::kDecompositionData + it->offset + it->length);
  else
    out.push_back(cp);
}

char32_t compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  if (first >= kCodeSpace || second >= kCodeSpace) return 0;
  const auto& map = tables().composite_of;
  const auto it = map.find(uint64_t(first) << 21 | second);
  return it == map.end() ? 0 : it->second;
}

// Full NFC of a span that starts at a safe boundary and ends before one (see nfc()).
void normalize_span(std::string_view span, std::vector<char32_t>& buf, std::string& out) {
  buf.clear();
  const auto* s = reinterpret_cast<const unsigned char*>(span.data());
  for (size_t i = 0; i < span.size();) {
    const Unit u = decode(s + i, span.size() - i);
    if (u.valid) {
      decompose(u.cp, buf);
    } else {
      for (size_t k = 0; k < u.length; ++k) buf.push_back(kRawByte + s[i + k]);
    }
    i += u.length;
  }
  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (size_t i = 1; i < buf.size(); ++i) {
    const uint8_t r = rank_of(buf[i]);
    if (r == 0) continue;
    for (size_t j = i; j > 0 && rank_of(buf[j - 1]) > r; --j) std::swap(buf[j], buf[j - 1]);
  }
  // Canonical composition (UAX #15): a character joins the last starter unless blocked by a character
  // in between of class 0 or of a class not lower than its own.
  if (!buf.empty()) {
    size_t starter = 0, kept = 1;
    int last_rank = rank_of(buf[0]) == 0 ? 0 : 256;  // a leading non-starter blocks everything
    for (size_t i = 1; i < buf.size(); ++i) {
      const char32_t c = buf[i];
      const int r = rank_of(c);
      const char32_t composite = (last_rank < r || last_rank == 0) ? compose(buf[starter], c) : 0;
      if (composite != 0) {
        buf[starter] = composite;
        continue;
      }
      if (r == 0) starter = kept;
      last_rank = r;
      buf[kept++] = c;
    }
    buf.resize(kept);
  }
  for (const char32_t c : buf) {
    if (c >= kRawByte)
      out.push_back(char(c - kRawByte));
    else
      append_utf8(c, out);
  }
}

}  // namespace

const Properties& properties() { return tables().properties; }

const char* version() { return ut::kUnicodeVersion; }

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xc0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xe0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(char(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(char(0xf0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(char(0x80 | (cp & 0x3f)));
  }
}

namespace {

// The first position from i whose byte could start a character that needs an NFC check: nothing below U+0300
// (lead byte 0xCC) does. Skips ASCII 8 bytes at a time.
size_t skip_quick(const unsigned char* s, size_t i, size_t n) {
  while (i < n) {
    uint64_t word;
    if (i + 8 <= n && (std::memcpy(&word, s + i, 8), (word & 0x8080808080808080ull) == 0))
      i += 8;
    else if (s[i] < 0xcc)
      ++i;
    else
      break;
  }
  return i;
}

// The start of the unit that ends at lead byte j, not below `floor`: a well-formed character, or else the ill-formed
// byte j - 1 (ill-formed bytes pass through normalization one by one, so any of them is a unit start).
size_t unit_before(const unsigned char* s, size_t n, size_t j, size_t floor) {
  if (j == floor) return j;
  size_t p = j - 1;
  while (p > floor && p + 4 > j && (s[p] & 0xc0) == 0x80) --p;  // at most 3 continuation bytes
  const Unit u = decode(s + p, n - p);
  return u.valid && p + u.length == j ? p : j - 1;
}

}  // namespace

bool nfc(std::string_view text, std::string& out) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  // Only spans that hold characters needing a check are normalized: from the unit before such a run (every unit
  // that needs no check is a safe boundary: it neither changes nor combines with what precedes it) to the end of
  // the run. The rest is copied as it is.
  size_t i = 0, copied = 0, last_end = 0;
  bool changed = false;
  std::vector<char32_t> buf;
  std::string span_out;
  while ((i = skip_quick(s, i, n)) < n) {
    const Unit u = decode(s + i, n - i);
    if (!u.valid || !needs_nfc_check(u.cp)) {
      i += u.length;
      continue;
    }
    const size_t start = unit_before(s, n, i, last_end);
    size_t end = i + u.length;
    while (end < n) {
      const Unit v = decode(s + end, n - end);
      if (!v.valid || !needs_nfc_check(v.cp)) break;
      end += v.length;
    }
    span_out.clear();
    normalize_span(text.substr(start, end - start), buf, span_out);
    if (span_out != text.substr(start, end - start)) {
      if (!changed) out.clear();
      changed = true;
      out.append(text.substr(copied, start - copied));
      out += span_out;
      copied = end;
    }
    i = last_end = end;
  }
  if (changed) out.append(text.substr(copied));
  return changed;
}

size_t first_invalid_utf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  for (size_t i = 0; i < n;) {
    uint64_t word;
    if (i + 8 <= n && (std::memcpy(&word, s + i, 8), (word & 0x8080808080808080ull) == 0)) {
      i += 8;  // ASCII
      continue;
    }
    const Unit u = decode(s + i, n - i);
    if (!u.valid) return i;
    i += u.length;
  }
  return std::string_view::npos;
}

bool is_valid_utf8(std::string_view bytes) { return first_invalid_utf8(bytes) == std::string_view::npos; }

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < bytes.size();) {
    const Unit u = decode(s + i, bytes.size() - i);
    if (u.valid)
      out.append(bytes.substr(i, u.length));
    else
      out += "\xEF\xBF\xBD";  // U+FFFD
    i += u.length;
  }
  return out;
}

}  // namespace primer::data::unicode
