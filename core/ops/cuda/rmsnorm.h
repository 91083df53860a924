// CUDA RMSNorm launchers (compute stream), plain, gated and L2 (core/ops/rmsnorm.h). Pointers are to contiguous
// memory; x/w/z/y/dy/dx/dz of `dtype` (f32/bf16).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

// Longest row, in packs: 16-byte packs when D is a multiple of 16 bytes (bf16 D <= 16384, f32 D <= 8192),
// single elements otherwise (D <= 2048). A row's packs stay in the registers of at most 256 threads.
constexpr int64_t kRmsNormMaxPacks = 2048;
// The gated variants: rows of whole 16-byte packs, at most this many (bf16 D <= 4096, f32 D <= 2048).
constexpr int64_t kRmsNormGatedMaxPacks = 512;

struct NormShape {
  int64_t rows, D;
  int64_t weight_rows;  // G: row r uses weight row r mod G; 0: unit weight (w null)
  int gate;             // ops::NormGate: 0 none, 1 after, 2 before (z null without a gate)
  bool l2;              // rsqrt(Σx² + eps) instead of rsqrt(mean(x²) + eps)
  DType dtype;
  bool from_output = false;  // backward: x is the output x_in·r (ops::NormSpec::from_output)
};

// y, x, z [rows, D]; w [G, D]; rstd f32 [rows] (may be null).
void rmsnorm_forward(void* y, float* rstd, const void* x, const void* w, const void* z, const NormShape& s, float eps);
// dx, dz, dy, x, z [rows, D] (dz, z null without a gate); w [G, D]; rstd f32 [rows]; dw_accum f32 [G, D] (null
// with unit weight) += Σ over rows of dy ∂y/∂w.
void rmsnorm_backward(void* dx, void* dz, float* dw_accum, const void* dy, const void* x, const void* w, const void* z,
                      const float* rstd, const NormShape& s);

}  // namespace primer::ops::cuda_ops
