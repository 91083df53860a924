// Whole-sequence views for sequence parallelism: USP's all-gather of a mixer's input into sequence order (and the
// reduce-scatter of its gradient), the local part of a whole-sequence output, and the chunk-row view that P2P mixers
// run on (zig-zag chunks stacked as batch rows, as the reference's reorder_for_ssm_p2p).
#pragma once
#include "core/autograd/variable.h"
#include "core/sequence_layout.h"
#include "parallel/comm/communicator.h"

namespace primer::parallel {

// x [B, T_local, ...] (this rank's chunks in layout order) → [B, T, ...] in sequence order on every rank; backward:
// reduce-scatter (sum) of the whole-sequence gradient, so each rank gets every rank's gradient of its part.
ag::Var gather_sequence(Communicator& comm, SequenceLayout layout, const ag::Var& x);
// The same for a constant tensor (positions), without a tape node.
Tensor gather_sequence(Communicator& comm, SequenceLayout layout, const Tensor& x);
// y [B, T, ...] → this rank's part [B, T_local, ...]; backward: zeros outside it.
ag::Var local_part(Communicator& comm, SequenceLayout layout, const ag::Var& y);

// [B, chunks·Tc, ...] ↔ [chunks·B, Tc, ...] (chunk-major rows); identity for one chunk.
ag::Var to_chunk_rows(const ag::Var& x, int64_t chunks);
ag::Var from_chunk_rows(const ag::Var& x, int64_t chunks);

}  // namespace primer::parallel
