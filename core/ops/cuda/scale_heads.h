// CUDA launchers of ops::scale_heads (compute stream): contiguous x [rows, Hx, D] of `x_dtype` (f32/bf16) and
// out/dout/base/dbase [rows, Hx·G, D] of `out_dtype` (x's, or f32 from bf16), base nullable (needed by lerp), s f32
// [rows, H] (per_row) or [H]; ds_rows f32 [rows, H] (the per-row products, which the op sums over rows for a
// per-head s). f32 math.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

struct ScaleHeadsDims {
  int64_t rows = 0, x_heads = 0, groups = 0, head_dim = 0;
  bool per_row = false;  // s is [rows, H]; else [H]
  bool lerp = false;     // out = base + s·(x − base)
};

// hi and lo (nullable; lo only beside hi, both only for an f32 output): bf16 like out, receiving the output split as
// hi + lo (hi rounded to nearest, lo the rest rounded).
void scale_heads_forward(void* out, const void* x, const float* s, const void* base, void* hi, void* lo,
                         const ScaleHeadsDims& dims, DType x_dtype, DType out_dtype);
// dx_addend (nullable, like dx) is added to dx; dout_part (nullable, like dout) to dout as it is read; base and dbase
// (both non-null iff dims.lerp) are the lerp's base and its gradient.
void scale_heads_backward(void* dx, float* ds_rows, void* dbase, const void* dout, const void* dout_part, const void* x,
                          const float* s, const void* base, const void* dx_addend, const ScaleHeadsDims& dims,
                          DType x_dtype, DType out_dtype);

}  // namespace primer::ops::cuda_ops
