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

// One softmax over the keys of two sources (B'MOJO-F's in-context and fading windows): source s has its queries,
// keys, values and dims (B, Tq, Hq, Hkv, Dh and scale equal across the sources; Tk and the mask may differ). The
// sources share their queries where their q pointers are equal. Hopper kernels only: call these only when
// attention_two_sources_available(); elsewhere compose two attentions and ops::lse_merge.
struct AttentionSource {
  const void *q, *k, *v;
  AttentionDims dims;
};
bool attention_two_sources_available();

// out [B, Tq, Hq, Dh] bf16 and lse [B, Hq, Tq] f32 over the union of both sources' visible keys.
void attention_forward_two_sources(void* out, float* lse, const AttentionSource (&sources)[2]);

// Each source's gradients: dk, dv [B, Tk, Hkv, Dh] bf16 (overwritten), dq_accum f32 [B, Tq, Hq, Dh] (zeroed here,
// then accumulated); sources that share their queries share one dq_accum (pass the same pointer).
struct AttentionSourceGrads {
  float* dq_accum;
  void *dk, *dv;
};
void attention_backward_two_sources(const AttentionSourceGrads (&grads)[2], float* delta, const void* dout,
                                    const void* out, const float* lse, const AttentionSource (&sources)[2]);

}  // namespace primer::ops::cuda_ops
