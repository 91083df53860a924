// The chunks of a sequence-parallel layout as chains of neighbouring ranks, and the one-step exchanges along them:
// the pieces that conv halos and state passing are built from.
//
// Contiguous: one chain, each rank's chunk, ranks ascending. Zig-zag (chunks r and 2P−1−r on rank r): chain 0 is the
// first half (slot 0, ranks ascending), chain 1 the second half (slot 1, ranks descending), and the last rank hands
// chain 0's end to chain 1's start locally. In sequence order every chunk's predecessor is the previous position of
// its chain (or, for chain 1's start, chain 0's end).
#pragma once
#include <string_view>

#include "core/sequence_layout.h"
#include "core/tensor.h"
#include "parallel/comm/communicator.h"

namespace primer::parallel {

struct Chain {
  int slot = 0;           // the local chunk of each rank on this chain
  bool ascending = true;  // ranks in chain order 0, 1, …, P−1 (else P−1, …, 0)
  int ranks = 1;

  int position(int rank) const { return ascending ? rank : ranks - 1 - rank; }
  int rank_at(int position) const { return ascending ? position : ranks - 1 - position; }
  Chain reversed() const { return {slot, !ascending, ranks}; }
};

// The chains of a layout in sequence order (one or two).
std::vector<Chain> chains_of(SequenceLayout layout, int ranks);

// One step along a chain, every rank at once: the rank at position p sends `send` (if defined and p + distance
// exists) to position p + distance and receives into `recv` (if defined and p − distance exists) from position
// p − distance. Ranks without a partner skip that side. Collective over comm (every rank calls it).
void chain_step(Communicator& comm, const Chain& chain, int distance, const Tensor& send, const Tensor& recv,
                std::string_view label);

}  // namespace primer::parallel
