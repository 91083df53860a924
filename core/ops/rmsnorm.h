// RMSNorm over the last dimension (Qwen3/Llama): y = w * (x * rsqrt(mean(x^2) + eps)), math in fp32 or wider; and
// the variants the SSM mixers use around it, each one pass over memory each way:
//   gate After  (fla's FusedRMSNormGated; GDN, GKA): y = w ⊙ x·r(x) ⊙ silu(z)
//   gate Before (Mamba-2's RMSNormGated, norm_before_gate = False): a = x ⊙ silu(z), y = w ⊙ a·r(a)
//   l2 (L2 normalisation, fla's l2norm): r(u) = rsqrt(Σu² + eps) instead of rsqrt(mean(u²) + eps)
#pragma once
#include "core/tensor.h"

namespace primer::ops {

enum class NormGate { None, After, Before };

struct NormSpec {
  double eps = 1e-6;
  NormGate gate = NormGate::None;
  bool l2 = false;
  // Backward only: x is the norm's output y = x_in·r (no gate, unit weight) instead of its input, for a norm formed
  // in another op's pass that kept no input (ops::causal_conv1d_l2). Then dx_in = r·(dy − y·inv_n·Σ dy·y).
  bool from_output = false;
};

// x [..., D] (f32/bf16 on CUDA; f32/f64 on CPU); w of x's dtype: [D], [G, D] with x [..., G, D] (per-head weights:
// row r of x uses weight row r mod G), or undefined (unit weight); z like x when spec.gate != None, else undefined.
// Returns y like x. If rstd_out is non-null it is set to a new tensor of the per-row r (of x, or of a under
// gate Before): f32 [rows] (f64 for f64 x), rows = numel / D.
Tensor rmsnorm(const Tensor& x, const Tensor& w, const Tensor& z, const NormSpec& spec, Tensor* rstd_out);
inline Tensor rmsnorm(const Tensor& x, const Tensor& w, double eps, Tensor* rstd_out) {
  return rmsnorm(x, w, Tensor(), NormSpec{eps}, rstd_out);
}

struct NormGrads {
  Tensor dx, dz;  // dz undefined without a gate
};

// The gradients of y given dy (x the input, or the output under spec.from_output); accumulates dw_accum (f32 like w,
// f64 for f64 x; undefined iff w is) += Σ over rows of dy ∂y/∂w. Deterministic on CUDA (per-block partial sums reduced
// in a fixed order; no float atomics).
NormGrads rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& z, const Tensor& rstd,
                           const NormSpec& spec, const Tensor& dw_accum);
inline Tensor rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                               const Tensor& dw_accum) {
  return rmsnorm_backward(dy, x, w, Tensor(), rstd, NormSpec{}, dw_accum).dx;
}

}  // namespace primer::ops
