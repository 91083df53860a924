// The all-to-all between the sequence split and the head split (DeepSpeed-Ulysses): [B, T_local, H, ...] (this
// rank's tokens, every head) ↔ [B, T, H/P, ...] (every token in sequence order, head group `rank` of P). Ulysses
// attention moves q, k, v and its output this way; recurrent mixers in A2A mode move their per-head features, gates
// and core output (docs/distributed.md, "A2A for recurrent mixers").
#pragma once
#include "core/autograd/variable.h"
#include "core/sequence_layout.h"
#include "parallel/comm/communicator.h"

namespace primer::parallel::sp {

// x [B, T, H, ...] (contiguous) → a view [P, B, T, H/P, ...], head group j at [j] (H a multiple of `ranks`).
Tensor by_head_group(const Tensor& x, int64_t ranks);
// The inverse: groups [P, B, T, h, ...] → [B, T, P·h, ...] (contiguous).
Tensor from_head_groups(const Tensor& groups);

// x [B, T_local, H, ...] in the layout's local order → [B, T, H/P, ...] in sequence order, this rank's head group.
Tensor scatter_heads(Communicator& comm, SequenceLayout layout, const Tensor& x, std::string_view label);
// The inverse: y [B, T, H/P, ...] → [B, T_local, H, ...].
Tensor gather_heads(Communicator& comm, SequenceLayout layout, const Tensor& y, std::string_view label);

// The same on the tape; the backward of each is the other's all-to-all (collective: every rank runs it).
ag::Var scatter_heads(Communicator& comm, SequenceLayout layout, const ag::Var& x);
ag::Var gather_heads(Communicator& comm, SequenceLayout layout, const ag::Var& y);

}  // namespace primer::parallel::sp
