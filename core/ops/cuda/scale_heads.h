// CUDA launchers of ops::scale_heads (compute stream): contiguous x [rows, Hx, D] and out/dout [rows, Hx·G, D] of
// `dtype` (f32/bf16), base nullable, s f32 [rows, H] (per_row) or [H]; ds_rows f32 [rows, H] (the per-row products,
// which the op sums over rows for a per-head s). f32 math.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

struct ScaleHeadsDims {
  int64_t rows, x_heads, groups, head_dim;
  bool per_row;  // s is [rows, H]; else [H]
};

void scale_heads_forward(void* out, const void* x, const float* s, const void* base, const ScaleHeadsDims& dims,
                         DType dtype);
// dx_addend (nullable, like dx) is added to dx.
void scale_heads_backward(void* dx, float* ds_rows, const void* dout, const void* x, const float* s,
                          const void* dx_addend, const ScaleHeadsDims& dims, DType dtype);

}  // namespace primer::ops::cuda_ops
