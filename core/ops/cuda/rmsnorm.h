// CUDA RMSNorm launchers (compute stream). Pointers are to contiguous memory; x/w/y/dy/dx of `dtype` (f32/bf16).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

// Longest row, in packs: 16-byte packs when D is a multiple of 16 bytes (bf16 D <= 16384, f32 D <= 8192),
// single elements otherwise (D <= 2048). A row's packs stay in the registers of at most 256 threads.
constexpr int64_t kRmsNormMaxPacks = 2048;

// y, x [rows, D]; w [D]; rstd f32 [rows] (may be null).
void rmsnorm_forward(void* y, float* rstd, const void* x, const void* w, int64_t rows, int64_t D, float eps,
                     DType dtype);
// dx, dy, x [rows, D]; w [D]; rstd f32 [rows]; dw_accum f32 [D] += sum over rows of dy * x * rstd.
void rmsnorm_backward(void* dx, float* dw_accum, const void* dy, const void* x, const void* w, const float* rstd,
                      int64_t rows, int64_t D, DType dtype);

}  // namespace primer::ops::cuda_ops
