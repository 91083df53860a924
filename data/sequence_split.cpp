#include "data/sequence_split.h"

#include "core/check.h"

namespace primer::data {

SequenceLayout parse_sequence_layout(const std::string& name) {
  if (name == "contiguous") return SequenceLayout::Contiguous;
  if (name == "zigzag") return SequenceLayout::ZigZag;
  PRIMER_FAIL("sequence layout '{}': expected contiguous or zigzag", name);
}

const char* sequence_layout_name(SequenceLayout layout) {
  return layout == SequenceLayout::Contiguous ? "contiguous" : "zigzag";
}

std::vector<std::pair<int64_t, int64_t>> sequence_part(int64_t length, int64_t ranks, int64_t rank,
                                                       SequenceLayout layout) {
  PRIMER_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "sequence part: rank {} of {}", rank, ranks);
  const int64_t chunks = layout == SequenceLayout::ZigZag ? 2 * ranks : ranks;
  PRIMER_CHECK(length > 0 && length % chunks == 0,
               "sequence length {} does not split into {} equal chunks ({} layout over {} sequence-parallel ranks)",
               length, chunks, sequence_layout_name(layout), ranks);
  const int64_t c = length / chunks;
  if (layout == SequenceLayout::Contiguous) return {{rank * c, (rank + 1) * c}};
  const int64_t mirror = chunks - 1 - rank;
  return {{rank * c, (rank + 1) * c}, {mirror * c, (mirror + 1) * c}};
}

}  // namespace primer::data
