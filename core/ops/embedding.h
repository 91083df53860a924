// Token embedding: gather rows of a table by id, and the deterministic scatter-add of its backward.
#pragma once
#include "core/tensor.h"

namespace primer::ops {

// weight [V, D] (CPU f32/f64, CUDA f32/bf16); ids i32/i64 of any shape [...], same device; returns [..., D].
// An id outside [0, V) is an error on the CPU (the message names its position and value). CUDA ids are not
// checked on the host (that would need a device-to-host read): such a token gets a row of NaN.
Tensor embedding(const Tensor& weight, const Tensor& ids);

// dweight_accum [V, D] (f32; f64 when dy is f64) += rows of dy [..., D] scattered by ids. Deterministic on CUDA:
// tokens are sorted by id (stable) and each id sums its rows in token order, no float atomics. CUDA tokens with
// an out-of-range id contribute nothing.
void embedding_backward(const Tensor& dy, const Tensor& ids, const Tensor& dweight_accum);

}  // namespace primer::ops
