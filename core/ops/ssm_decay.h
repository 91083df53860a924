// The log-space decay of Mamba-2, GDN, GKA and GDN-2, g = −exp(A_log)·softplus(a + dt_bias), and optionally the step
// Δ = softplus(a + dt_bias) (Mamba-2's value scale), in one pass each way instead of a cast, a bias add, a softplus,
// an exp, a scale and a product (and their backward passes and parameter sums).
//   a [..., P] in any float dtype, with its trailing dims those of dt_bias (P values: per head, or per head and
//   channel for GDN-2); A_log of A values, A dividing P, shared by consecutive groups of P/A (A_log [H] with
//   dt_bias [H, D]); g and Δ like a, in A_log's dtype (f32; f64 beside f64). f32 math on CUDA, f64 on the CPU.
// Backward, with z = a + dt_bias and σ = sigmoid(z):
//   dz = (dg·(−exp(A_log)) + dΔ)·σ,  da = dz (in a's dtype),  ddt_bias = Σ_rows dz,  dA_log = Σ_rows,group dg·g.
#pragma once
#include "core/tensor.h"

namespace primer::ops {

// Returns g; *delta (if non-null) receives Δ.
Tensor ssm_decay(const Tensor& a, const Tensor& A_log, const Tensor& dt_bias, Tensor* delta = nullptr);

struct SsmDecayGrads {
  Tensor da, dA_log, ddt_bias;  // like a, A_log, dt_bias
};
// dg and ddelta like g (either may be undefined: no gradient reached it).
SsmDecayGrads ssm_decay_backward(const Tensor& dg, const Tensor& ddelta, const Tensor& a, const Tensor& A_log,
                                 const Tensor& dt_bias);

}  // namespace primer::ops
