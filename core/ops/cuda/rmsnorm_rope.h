// CUDA launchers of the per-head RMSNorm followed by RoPE (Qwen3's q and k; ops/rmsnorm_rope.h), compute stream.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

struct NormRopeShape {
  int64_t tokens, heads, head_dim;
  DType dtype;  // of x, w, y, dx
};

// Whether the fused kernels take this shape: a head of 2..32 whole 16-byte packs, a power of two (a row's packs are
// one aligned group of lanes, the rotation's partner pack half a group away), and 16-byte aligned pointers.
bool norm_rope_supported(const NormRopeShape& s, std::initializer_list<const void*> ptrs);

// y = rope(w ⊙ x·rstd), rstd[row] = rsqrt(mean(x²) + eps) (f32 [tokens·heads]); positions i32 [tokens], inv_freq
// f32 [head_dim/2].
void rmsnorm_rope_forward(void* y, float* rstd, const void* x, const void* w, const int32_t* positions,
                          const float* inv_freq, const NormRopeShape& s, float eps);
// dx from dy (of `dy_dtype`: x's dtype or f32); dw_partial f32 [blocks, head_dim] receives each block's sum of
// dy_rot ⊙ x·rstd, where blocks = norm_rope_backward_blocks(s).
int64_t norm_rope_backward_blocks(const NormRopeShape& s);
void rmsnorm_rope_backward(void* dx, float* dw_partial, const void* dy, DType dy_dtype, const void* x, const void* w,
                           const float* rstd, const int32_t* positions, const float* inv_freq, const NormRopeShape& s);

}  // namespace primer::ops::cuda_ops
