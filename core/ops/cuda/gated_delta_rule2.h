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
inline constexpr int64_t kGatedDelta2CtaColumns = 16;  // value columns per CTA; key rows are padded to 32
inline int64_t gated_delta_rule2_scratch_floats(const GatedDelta2Shape& s) {
  const auto round_up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  const int64_t blocks = (s.time + kGatedDelta2CheckpointEvery - 1) / kGatedDelta2CheckpointEvery;
  return s.batch * s.time * s.heads * s.value_dim +
         s.batch * s.heads * blocks * round_up(s.value_dim, kGatedDelta2CtaColumns) * round_up(s.key_dim, 32);
}

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
