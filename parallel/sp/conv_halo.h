// P2P conv halo (the Priming paper §9.2.2): a short causal convolution's output at t reads the conv_size−1 inputs
// before t, which for a chunk's first tokens live on the rank holding the previous chunk. Each rank sends its chunks'
// last inputs to the successors' ranks (in one neighbour round per chain) and gets its predecessors' as conv states;
// in backward the halo's gradient goes back and is added to the sender's inputs.
#pragma once
#include "core/autograd/variable.h"
#include "core/sequence_layout.h"
#include "parallel/comm/communicator.h"

namespace primer::parallel {

// x: chunk rows [R, Tc, C] (R = chunks·B, chunk-major). Returns the conv state [R, C, width] of each row: the
// previous chunk's last `width` inputs, `initial` [B, C, width] (null: zeros) for the sequence's first chunk.
ag::Var conv_halo(Communicator& comm, SequenceLayout layout, const ag::Var& x, int64_t width, const ag::Var& initial);

}  // namespace primer::parallel
