// The reference is the gated delta rule's token-by-token reference (itself checked against finite differences) with
// β_t = η_t / (‖k_t‖² + ε) computed here, and the chain rule through β written out by hand.
#include "core/ops/kaczmarz_delta_rule.h"

#include <cmath>

#include "core/check.h"
#include "core/ops/gated_delta_rule.h"

namespace primer::ops::reference {
namespace {

// β [B, T, H] and ‖k‖² + ε [B, T, H] from k [B, T, H, K] and η [B, T, H] (f64).
void kaczmarz_step(const Tensor& k, const Tensor& eta, double eps, Tensor& beta, Tensor& norm_eps) {
  PRIMER_CHECK(k.is_cpu() && k.dtype() == DType::F64 && k.dim() == 4,
               "reference::kaczmarz_delta_rule: k is {}, expected "
               "f64 [B, T, H, K] on the CPU",
               k.describe());
  PRIMER_CHECK(eta.is_cpu() && eta.dtype() == DType::F64 && eta.shape() == Shape({k.size(0), k.size(1), k.size(2)}),
               "reference::kaczmarz_delta_rule: eta is {}, expected f64 [{}, {}, {}] on the CPU", eta.describe(),
               k.size(0), k.size(1), k.size(2));
  PRIMER_CHECK(eps >= 0 && std::isfinite(eps), "reference::kaczmarz_delta_rule: eps is {}, expected ≥ 0", eps);
  const Tensor kc = k.contiguous(), ec = eta.contiguous();
  beta = Tensor::empty(eta.shape(), DType::F64);
  norm_eps = Tensor::empty(eta.shape(), DType::F64);
  const int64_t rows = eta.numel(), K = k.size(3);
  const double* kp = kc.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double n = eps;
    for (int64_t i = 0; i < K; ++i) n += kp[r * K + i] * kp[r * K + i];
    norm_eps.data<double>()[r] = n;
    beta.data<double>()[r] = ec.data<double>()[r] / n;
  }
}

}  // namespace

Tensor kaczmarz_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& eta,
                           double scale, double eps, const Tensor& state_in, Tensor* state_out) {
  Tensor beta, norm_eps;
  kaczmarz_step(k, eta, eps, beta, norm_eps);
  return gated_delta_rule(q, k, v, g, beta, scale, state_in, state_out);
}

KaczmarzDeltaGrads kaczmarz_delta_rule_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                                const Tensor& g, const Tensor& eta, double scale, double eps,
                                                const Tensor& state_in, const Tensor& dstate_out) {
  Tensor beta, norm_eps;
  kaczmarz_step(k, eta, eps, beta, norm_eps);
  GatedDeltaGrads gd = gated_delta_rule_backward(dout, q, k, v, g, beta, scale, state_in, dstate_out);
  KaczmarzDeltaGrads r{gd.dq, gd.dk.contiguous(), gd.dv, gd.dg, Tensor::empty(eta.shape(), DType::F64), gd.dstate_in};
  const Tensor kc = k.contiguous();
  const int64_t rows = eta.numel(), K = k.size(3);
  for (int64_t row = 0; row < rows; ++row) {
    const double n = norm_eps.data<double>()[row], b = beta.data<double>()[row];
    const double dbeta = gd.dbeta.data<double>()[row];
    r.deta.data<double>()[row] = dbeta / n;
    // β = η / (Σk² + ε): ∂β/∂k_i = −2 β k_i / (Σk² + ε).
    for (int64_t i = 0; i < K; ++i)
      r.dk.data<double>()[row * K + i] -= 2 * b * dbeta * kc.data<double>()[row * K + i] / n;
  }
  return r;
}

}  // namespace primer::ops::reference
