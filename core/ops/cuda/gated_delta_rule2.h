// CUDA launchers of ops::gated_delta_rule2 (compute stream, no host sync). q, k, v, o and their gradients are of
// `dtype` (f32 or bf16); the gates g, b, w, the states and every accumulation are f32. K (the key head dim) is at
// most 128; V is any size.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

struct GatedDelta2Shape {
  int64_t batch, time, heads, key_dim, value_dim;  // B, T, H, K, V
};

// The backward keeps the state every kGatedDelta2CheckpointEvery tokens and each token's write residual
// ρ_t = w_t⊙v_t − S̄_tᵀ(b_t⊙k_t) in an f32 scratch of this many floats (B·T·H·V for ρ and B·H·⌈T/32⌉·K·V for the
// states, both rounded up to the kernels' tiles: 671 MB at B 4, T 4096, H 16, K = V = 128).
inline constexpr int64_t kGatedDelta2CheckpointEvery = 32;
int64_t gated_delta_rule2_scratch_floats(const GatedDelta2Shape& shape);

// state_in (null: zeros) and state_out may be null.
void gated_delta_rule2_forward(const GatedDelta2Shape& shape, DType dtype, const void* q, const void* k, const void* v,
                               const float* g, const float* b, const float* w, const float* state_in, float scale,
                               void* o, float* state_out);

// dstate_out (null: zero), state_in (null: zeros) and dstate_in may be null. dq, dk, dg and db are f32 accumulators
// the caller zeroes (they sum over the value columns of several CTAs); dv (`dtype`) and dw are written whole.
void gated_delta_rule2_backward(const GatedDelta2Shape& shape, DType dtype, const void* dout, const float* dstate_out,
                                const void* q, const void* k, const void* v, const float* g, const float* b,
                                const float* w, const float* state_in, float scale, float* dq, float* dk, void* dv,
                                float* dg, float* db, float* dw, float* dstate_in, float* scratch);

}  // namespace primer::ops::cuda_ops
