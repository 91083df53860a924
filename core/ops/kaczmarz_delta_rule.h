// Kaczmarz linear attention's core (KZLA; Zou, Ren and Liu, "Kaczmarz Linear Attention", 2026, eq. (3)): the gated
// delta rule on raw (unnormalised) keys with the Kaczmarz step size. Per batch b, head h and token t:
//   S'_t = exp(g_t) · S_{t−1}
//   S_t  = S'_t + β_t k_t (v_t − S'_tᵀ k_t)ᵀ,      β_t = η_t / (‖k_t‖² + ε)
//   o_t  = scale · S_tᵀ q_t,                      S_0 = state_in (zeros if undefined)
// This file holds the ground truth (f64, token by token). The implementation that runs (ag::kaczmarz_delta_rule)
// uses the exact identity
//   KZLA(k, v, η) = GatedDeltaRule(k / sqrt(‖k‖² + ε), v / sqrt(‖k‖² + ε), β = η)
// (the two give the same state at every step, for any ε ≥ 0 and k, including k = 0), so it runs on the gated delta
// rule's chunked CPU path and CUDA kernels.
#pragma once
#include "core/tensor.h"

namespace primer::ops {

struct KaczmarzDeltaGrads {
  Tensor dq, dk, dv;  // like q, k, v
  Tensor dg, deta;    // like g, eta
  Tensor dstate_in;   // like state_in; defined iff state_in is
};

namespace reference {
// q, k [B, T, H, K]; v [B, T, H, V]; g, eta [B, T, H]; state_in [B, H, K, V] (undefined: zeros); all f64 on the CPU.
// Returns o [B, T, H, V]; *state_out (if non-null) receives S_T.
Tensor kaczmarz_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& eta,
                           double scale, double eps, const Tensor& state_in, Tensor* state_out);
// Gradients of <dout, o> + <dstate_out, S_T> (dstate_out may be undefined: zero), including the path through
// β_t's key norm: ∂β/∂η = 1/(‖k‖² + ε), ∂β/∂k = −2 β k / (‖k‖² + ε).
KaczmarzDeltaGrads kaczmarz_delta_rule_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                                const Tensor& g, const Tensor& eta, double scale, double eps,
                                                const Tensor& state_in, const Tensor& dstate_out);
}  // namespace reference

}  // namespace primer::ops
