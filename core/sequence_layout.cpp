#include "core/sequence_layout.h"

#include "core/check.h"

namespace primer {

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

int64_t sequence_chunks(int64_t ranks, SequenceLayout layout) {
  return layout == SequenceLayout::ZigZag ? 2 * ranks : ranks;
}

ChunkPlace chunk_place(int64_t chunk, int64_t ranks, SequenceLayout layout) {
  const int64_t chunks = sequence_chunks(ranks, layout);
  PRIMER_CHECK(chunk >= 0 && chunk < chunks, "chunk {} of {}", chunk, chunks);
  if (chunk < ranks) return {chunk, 0};
  return {chunks - 1 - chunk, 1};
}

int64_t chunk_index(int64_t rank, int64_t slot, int64_t ranks, SequenceLayout layout) {
  PRIMER_CHECK(rank >= 0 && rank < ranks && slot >= 0 && slot < sequence_chunks(ranks, layout) / ranks,
               "chunk slot {} of rank {} of {}", slot, rank, ranks);
  return slot == 0 ? rank : 2 * ranks - 1 - rank;
}

}  // namespace primer
