// The gated delta rule-2 (Gated DeltaNet-2; Hatamizadeh, Choi and Kautz, "Gated DeltaNet-2: Decoupling Erase and
// Write in Linear Attention", NVIDIA 2026): the delta rule with a channel-wise decay (as Kimi Delta Attention) and its
// scalar step β split into an erase gate b on the key axis and a write gate w on the value axis. Per batch b, head h
// and token t, with the state S [K, V] (keys index rows, values columns):
//   S̄_t = Diag(exp(g_t)) S_{t−1}                          g_t ∈ R^K, the log decay (≤ 0 in models)
//   S_t = S̄_t + k_t (w_t⊙v_t − S̄_tᵀ (b_t⊙k_t))ᵀ          = (I − k_t (b_t⊙k_t)ᵀ) Diag(α_t) S_{t−1} + k_t (w_t⊙v_t)ᵀ
//   o_t = scale · S_tᵀ q_t,                                 S_0 = state_in (zeros if undefined)
// The erase reads along the gated key b⊙k but writes along the raw k; b = w = β·1 is KDA, and a scalar decay besides
// is Gated DeltaNet. Three implementations that must agree: reference:: (token by token in f64, hand-written
// backward), the chunked CPU path (f32/f64; per chunk of 64 the UT transform with decays folded into the keys as
// pairwise ratios exp(G_r − G_s), r ≥ s, so no factor exceeds 1) and two CUDA paths: the chunked one of the same form
// on tensor cores (bf16 q, k, v with K = V ∈ {64, 128}; core/ops/cuda/gated_delta_rule2_chunked_*.cu) and the
// recurrence token by token in f32 with a checkpointed reverse walk (every other shape, f32 inputs; core/ops/cuda/
// gated_delta_rule2.cu).
#pragma once
#include "core/tensor.h"

namespace primer::ops {

// Which CUDA kernels run: `automatic` takes the chunked ones wherever they apply, except for calls of at most
// kGatedDelta2RecurrentTokens tokens (decode steps), where one padded chunk costs more than a few recurrent steps
// (forward, H 16, K = V = 128, H200: 0.034 against 0.012 ms at B 1, T 1; 0.066 against 0.040 ms at B 16, T 8; even
// at B 1, T 32 or B 16, T 16); `recurrent` forces the token-by-token ones (the GPU path the chunked kernels are tested
// against); `chunked` forces the chunked ones (an error where they do not apply). Ignored on the CPU.
enum class GatedDelta2Kernels { automatic, recurrent, chunked };
constexpr int64_t kGatedDelta2RecurrentTokens = 8;

// The dtype a layer should hand q, k, v over in: bf16 activations on CUDA stay bf16 where the chunked kernels apply;
// everything else computes in the gates' dtype (on CUDA the recurrent kernels are faster with f32 inputs).
DType gated_delta_rule2_token_dtype(Device device, DType activations, int64_t key_dim, int64_t value_dim, DType gates);

// q, k, g, b [B, T, H, K]; v, w [B, T, H, V]. If kept_scratch is non-null, where the chunked CUDA kernels run it
// receives what their backward would recompute (A, R and the chunk-start states with the rest of the chunk scratch:
// ≈ B·H·T·(6K + 128)·2 bytes plus B·H·⌈T/64⌉·K²·4, 0.74 GB at B 4, T 4096, H 16, K = V = 128); else undefined. On the
// CPU every tensor is f32 or every tensor f64; on CUDA q, k, v (and o, dout, dq, dk, dv) are f32 or bf16 and g, b, w,
// the states and their gradients f32, with K ≤ 128. Returns o [B, T, H, V]. If state_out is non-null it receives S_T
// [B, H, K, V].
Tensor gated_delta_rule2(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& b,
                         const Tensor& w, double scale, const Tensor& state_in, Tensor* state_out,
                         Tensor* kept_scratch = nullptr, GatedDelta2Kernels kernels = GatedDelta2Kernels::automatic);

struct GatedDelta2Grads {
  Tensor dq, dk, dv;  // like q, k, v
  Tensor dg, db, dw;  // like g, b, w
  Tensor dstate_in;   // like state_in; defined iff state_in is
};
// Gradients of <dout, o> + <dstate_out, S_T> (dstate_out may be undefined: zero). kept_scratch: the forward's on the
// same inputs, or undefined (recomputed); it is consumed (the backward writes its own scratch into it).
GatedDelta2Grads gated_delta_rule2_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& g, const Tensor& b, const Tensor& w, double scale,
                                            const Tensor& state_in, const Tensor& dstate_out,
                                            const Tensor& kept_scratch = Tensor(),
                                            GatedDelta2Kernels kernels = GatedDelta2Kernels::automatic);

namespace reference {
// The ground truth: the recurrence above token by token, f64 CPU tensors only, with a hand-written backward.
Tensor gated_delta_rule2(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& b,
                         const Tensor& w, double scale, const Tensor& state_in, Tensor* state_out);
GatedDelta2Grads gated_delta_rule2_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& g, const Tensor& b, const Tensor& w, double scale,
                                            const Tensor& state_in, const Tensor& dstate_out);
}  // namespace reference

}  // namespace primer::ops
