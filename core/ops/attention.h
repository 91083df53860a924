// Scaled dot-product softmax attention with GQA, a causal mask on global positions, an optional sliding window,
// and the log-sum-exp the backward (and ring/sequence-parallel merges) need. Never materialises a T x T matrix.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace primer::ops {

struct AttentionOptions {
  double scale = 0;  // 0 means 1/sqrt(head_dim)
  bool causal = true;
  int64_t window = 0;    // sliding window (needs causal): 0 = none; else query at p sees keys in (p - window, p]
  int64_t q_offset = 0;  // global position of query row 0 (sequence parallelism, decoding)
  int64_t k_offset = 0;  // global position of key row 0
  // CUDA backward: dq is returned as the f32 accumulator itself instead of rounded to q's dtype, for a consumer that
  // reads f32 (ops::rmsnorm_rope_backward): one pass and one rounding fewer.
  bool f32_dq = false;
};

// q [B, Tq, Hq, Dh]; k, v [B, Tk, Hkv, Dh], Hq a multiple of Hkv (query head h reads kv head h / (Hq / Hkv)).
// Key (k_offset + j) is visible to query (q_offset + i) iff k_offset + j <= q_offset + i (when causal) and, with a
// window, k_offset + j > q_offset + i - window. Returns out [B, Tq, Hq, Dh] (q's dtype). *lse_out (if given)
// receives [B, Hq, Tq] natural-log sum-exp of the scaled visible scores: f32 (f64 for the f64 CPU reference).
// A row with no visible key gets out = 0 and lse = -inf.
// CPU: f32/f64, any head_dim. CUDA: bf16, head_dim 64 or 128, fp32 softmax and accumulation.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt, Tensor* lse_out);

// Gradients given dout, the forward's out and lse. dq, dk, dv receive new tensors of q's dtype (dq f32 on CUDA under
// opt.f32_dq); dk and dv are summed over the query heads of each GQA group.
// CUDA: dk/dv are deterministic; dq is accumulated with fp32 atomics over key tiles (not bitwise reproducible).
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const AttentionOptions& opt, Tensor* dq, Tensor* dk, Tensor* dv);

// Softmax attention of one set of query rows over the union of two key sources, each with its own keys, values and
// options (B'MOJO-F: a window over the tokens themselves and one over an SSM's outputs further back), as one softmax:
// row i is Σ_j p_ij v_j over both sources' visible keys, p_ij = exp(s_ij − lse_i), lse_i = log Σ_j exp(s_ij).
// Source b reads its own queries, or a's where b.q is undefined (shared queries). Both sources need the same query
// shape, head counts, head_dim and scale. Where source a's window leaves a row without a key the CPU and fallback
// paths need its lse finite (ops::lse_merge); the fused CUDA kernel does not.
// CUDA on Hopper: one fused kernel each way (attention_forward_two_sources); elsewhere two attentions merged by
// ops::lse_merge, and each source's attention_backward given the merged out and lse (the exact gradient).
struct AttentionSource {
  Tensor q, k, v;  // q [B, Tq, Hq, Dh] (undefined for source b: a's), k/v [B, Tk, Hkv, Dh]
  AttentionOptions options;
};
Tensor merged_attention(const AttentionSource& a, const AttentionSource& b, Tensor* lse_out);

// Gradients of each source (q's dtype; f32_dq is ignored). With shared queries a->dq holds the whole dq and b->dq is
// left undefined.
struct AttentionSourceGrads {
  Tensor dq, dk, dv;
};
void merged_attention_backward(const Tensor& dout, const AttentionSource& a, const AttentionSource& b,
                               const Tensor& out, const Tensor& lse, AttentionSourceGrads* a_grads,
                               AttentionSourceGrads* b_grads);

}  // namespace primer::ops
