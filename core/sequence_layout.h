// How sequence-parallel ranks share one sequence (the Priming paper §9.2.1, the reference's SP data layout).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace primer {

enum class SequenceLayout {
  Contiguous,  // rank r of P holds chunk r of P equal chunks
  ZigZag,      // 2P chunks; rank r holds chunks r and 2P−1−r, in that order (balances causal attention)
};
SequenceLayout parse_sequence_layout(const std::string& name);  // contiguous, zigzag
const char* sequence_layout_name(SequenceLayout layout);

// The token ranges [begin, end) of a length-`length` sequence held by rank `rank` of `ranks`, in the order the
// rank stores them. The length must divide into the layout's chunks (P, or 2P for zig-zag).
std::vector<std::pair<int64_t, int64_t>> sequence_part(int64_t length, int64_t ranks, int64_t rank,
                                                       SequenceLayout layout);

// The layout's chunks in sequence order (P contiguous, 2P zig-zag) and where chunk c lives: on rank `rank` as its
// `slot`-th local chunk (0 or 1).
int64_t sequence_chunks(int64_t ranks, SequenceLayout layout);
struct ChunkPlace {
  int64_t rank = 0, slot = 0;
};
ChunkPlace chunk_place(int64_t chunk, int64_t ranks, SequenceLayout layout);
// The sequence-order index of rank `rank`'s local chunk `slot`.
int64_t chunk_index(int64_t rank, int64_t slot, int64_t ranks, SequenceLayout layout);

}  // namespace primer
