// Per-head RMSNorm followed by rotary position embedding, y = rope(rmsnorm(x, w)) — Qwen3's query and key heads
// (q_norm / k_norm, then RoPE) as one pass each way on CUDA instead of four (a norm and a rotation, each reading and
// writing the heads). Same arguments and conventions as ops::rmsnorm and ops::rope (rope.h). Where the fused CUDA
// kernels do not apply (head_dim not 2..32 whole 16-byte packs, a power of two, or unaligned data) and on the CPU
// it runs as the two ops.
#pragma once
#include "core/tensor.h"

namespace primer::ops {

// x [B, T, H, Dh] (f32/bf16 on CUDA, f32/f64 on the CPU); w [Dh] of x's dtype; positions i32 [B, T]; inv_freq f32
// [Dh/2]. Returns y like x and sets *rstd_out (f32 [B·T·H]; f64 for f64 x) for the backward. The fused kernel keeps
// the normalised head in fp32 for the rotation (the two ops round it to x's dtype in between).
Tensor rmsnorm_rope(const Tensor& x, const Tensor& w, double eps, const Tensor& positions, const Tensor& inv_freq,
                    Tensor* rstd_out);

// dx given dy (x's dtype, or f32 for bf16 x: attention's dq before rounding); dw_accum (f32 [Dh], f64 for f64 x)
// += Σ over rows of dy ∂y/∂w. Deterministic.
Tensor rmsnorm_rope_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                             const Tensor& positions, const Tensor& inv_freq, const Tensor& dw_accum);

}  // namespace primer::ops
