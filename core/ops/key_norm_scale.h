// The key-norm scaling that runs Kaczmarz linear attention on the gated delta rule (core/ops/kaczmarz_delta_rule.h):
// per row (token and head), r = (‖k‖² + ε)^(−1/2), k̂ = r·k, v̂ = r·v, in one pass on the CPU (f32 or f64; the CUDA
// kernels of ops::gated_delta_rule do the same inside themselves, with its raw_key_eps), and its backward
//   dk = r·dk̂ − r³ (⟨dk̂, k⟩ + ⟨dv̂, v⟩) k,   dv = r·dv̂.
#pragma once
#include "core/tensor.h"

namespace primer::ops {

struct KeyNormScaled {
  Tensor k, v;  // like k and v
  Tensor r;     // [rows...] without the last dim; f32 (f64 for f64 inputs)
};
// k [..., K], v [..., V] with the same leading dims, one dtype and device; eps ≥ 0.
KeyNormScaled key_norm_scale(const Tensor& k, const Tensor& v, double eps);

struct KeyNormScaleGrads {
  Tensor dk, dv;
};
// dk_hat, dv_hat like k, v; r from the forward.
KeyNormScaleGrads key_norm_scale_backward(const Tensor& dk_hat, const Tensor& dv_hat, const Tensor& k, const Tensor& v,
                                          const Tensor& r);

}  // namespace primer::ops
