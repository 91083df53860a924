// CUDA flash attention launchers (compute stream, no host sync). bf16 I/O, fp32 softmax and accumulation;
// head_dim 64 or 128. Pointers are to contiguous [B, T, H, Dh] tensors and [B, Hq, Tq] f32 statistics.
#pragma once
#include <cstdint>

namespace primer::ops::cuda_ops {

struct AttentionDims {
  int64_t B, Tq, Tk, Hq, Hkv, Dh;
  float scale;  // already resolved (never 0)
  bool causal;
  int64_t window, q_offset, k_offset;
};

// out [B, Tq, Hq, Dh] bf16; lse [B, Hq, Tq] f32.
void attention_forward(void* out, float* lse, const void* q, const void* k, const void* v, const AttentionDims& d);

// dk, dv [B, Tk, Hkv, Dh] bf16 (overwritten); dq_accum f32 [B, Tq, Hq, Dh] receives dq (zeroed here, then
// accumulated with fp32 reduce-adds); delta f32 [B, Hq, Tq] is scratch for rowsum(dout * out).
void attention_backward(float* dq_accum, void* dk, void* dv, float* delta, const void* dout, const void* q,
                        const void* k, const void* v, const void* out, const float* lse, const AttentionDims& d);

}  // namespace primer::ops::cuda_ops
