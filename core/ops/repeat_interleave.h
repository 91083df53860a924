// Each slice of x along one dim repeated `repeats` times in place (torch.repeat_interleave; grouped-query heads
// handed to every head of their group), and its adjoint: the sum over each slice's copies.
#pragma once
#include "core/tensor.h"

namespace primer::ops {

// x [..., n, ...] → [..., n·repeats, ...], slice i at i·repeats … i·repeats + repeats − 1 (one broadcast pass).
Tensor repeat_interleave(const Tensor& x, int dim, int64_t repeats);
// y [..., n·repeats, ...] → [..., n, ...]: slice i the sum of y's slices i·repeats … i·repeats + repeats − 1.
Tensor sum_repeats(const Tensor& y, int dim, int64_t repeats);

}  // namespace primer::ops
