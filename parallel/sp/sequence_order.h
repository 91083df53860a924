// Moving whole-sequence tensors between the sequence order and the ranks' layout order (core/sequence_layout.h):
// what the all-gather and Ulysses modes of sequence-parallel attention do after and before their collectives.
#pragma once
#include <cstdint>

#include "core/sequence_layout.h"
#include "core/tensor.h"

namespace primer::parallel::sp {

// parts [P, B, T_local, ...]: rank r's local rows (its chunks, in its storage order) at parts[r]
// → [B, P·T_local, ...] in sequence order. A new contiguous tensor.
Tensor to_sequence_order(const Tensor& parts, SequenceLayout layout);

// The inverse: full [B, T, ...] in sequence order → [P, B, T/P, ...], rank r's local rows at [r] (contiguous,
// ready for all_to_all / reduce_scatter).
Tensor to_rank_order(const Tensor& full, int64_t ranks, SequenceLayout layout);

}  // namespace primer::parallel::sp
