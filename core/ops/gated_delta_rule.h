// The gated delta rule (Gated DeltaNet), chunked. Per batch b, head h and token t, with an fp32 state S [K, V]:
//   S'_t = exp(g_t) · S_{t−1}
//   S_t  = S'_t + β_t k_t (v_t − S'_tᵀ k_t)ᵀ        i.e. S_t = exp(g_t)(I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ
//   o_t  = scale · S_tᵀ q_t,                        S_0 = state_in (zeros if undefined)
// q and k arrive L2-normalised from the layer. Three implementations that must agree: reference:: (token by token
// in f64), the chunked CPU path (f32/f64) and the chunked CUDA kernels (bf16/f32 I/O, fp32 state and accumulation).
#pragma once
#include "core/tensor.h"

namespace primer::ops {

// q [B, T, H, K]; k [B, T, Hk, K]; v [B, T, Hk, V]; g [B, T, H] log decay; beta [B, T, H] write strength. Hk divides
// H: grouped-query keys and values, head h reading key/value head h / (H / Hk) (as if each were repeated to its
// group's heads, which the CUDA kernels do by indexing instead of copies; their gradients are summed over each group).
// CPU: every tensor f32 or every tensor f64. CUDA: q, k, v all bf16 or all f32; g, beta and state_in f32.
// Returns o [B, T, H, V] in v's dtype. If state_out is non-null it receives S_T [B, H, K, V] (f32; f64 for f64).
// If kept_scratch is non-null, on CUDA it receives the chunk scratch the backward would recompute (the chunk-start
// states in bf16 and the per-token W, U, A rows: ≈ B·H·T·(K + 3V + 192)·2 bytes plus B·H·⌈T/64⌉·K·V·4, 0.4 GB at
// B 4, T 4096, H 16, K = V = 128), for gated_delta_rule_backward to skip that work; undefined on the CPU.
// raw_key_eps ≥ 0 (negative: off): k and v arrive raw, as Kaczmarz linear attention takes them
// (core/ops/kaczmarz_delta_rule.h); the recurrence runs on k̂ = r·k and v̂ = r·v with r = 1/sqrt(‖k‖² + raw_key_eps)
// per token (ops::key_norm_scale's maths; on CUDA inside the kernels, without a pass of its own), and the backward's
// dk, dv are those of the raw k and v. The backward must be given the same raw_key_eps.
Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        double scale, const Tensor& state_in, Tensor* state_out, Tensor* kept_scratch = nullptr,
                        double raw_key_eps = -1);

struct GatedDeltaGrads {
  Tensor dq, dk, dv;  // like q, k, v
  Tensor dg, dbeta;   // like g, beta
  Tensor dstate_in;   // like state_in; defined iff state_in is
};
// Gradients of <dout, o> + <dstate_out, S_T> (dstate_out may be undefined: zero). kept_scratch: the forward's on the
// same inputs, or undefined (recomputed). It is consumed: the backward writes its own gradients' scratch into it.
GatedDeltaGrads gated_delta_rule_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& g, const Tensor& beta, double scale, const Tensor& state_in,
                                          const Tensor& dstate_out, const Tensor& kept_scratch = Tensor(),
                                          double raw_key_eps = -1);

namespace reference {
// The ground truth: the recurrence above token by token, f64 CPU tensors only, with a hand-written backward.
Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        double scale, const Tensor& state_in, Tensor* state_out);
GatedDeltaGrads gated_delta_rule_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& g, const Tensor& beta, double scale, const Tensor& state_in,
                                          const Tensor& dstate_out);
}  // namespace reference

}  // namespace primer::ops
