// How sequence-parallel ranks share one sequence (the Priming paper §9.2.1, the reference's SP data layout).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace primer::data {

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

}  // namespace primer::data
