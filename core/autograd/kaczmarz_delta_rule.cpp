#include "core/autograd/kaczmarz_delta_rule.h"

#include "core/autograd/gated_delta_rule.h"
#include "core/check.h"
#include "core/ops/key_norm_scale.h"

namespace primer::ag {

Var kaczmarz_delta_rule(const Var& q, const Var& k, const Var& v, const Var& g, const Var& eta, double scale,
                        double eps, const Var& state_in, Var* state_out) {
  PRIMER_CHECK(k && k->value.dim() == 4, "kaczmarz_delta_rule: k is {}, expected [B, T, H, K]",
               k ? k->value.describe() : "null");
  PRIMER_CHECK(eps >= 0, "kaczmarz_delta_rule: eps is {}, expected ≥ 0", eps);
  // k̂ = r·k, v̂ = r·v with r = 1/sqrt(‖k‖² + ε), in f32 math whatever the I/O dtype (ε = 1e-6 is far below bf16's
  // resolution of ‖k‖²), rounded once on the way into the core; one fused pass each way (ops::key_norm_scale).
  const ops::KeyNormScaled scaled = ops::key_norm_scale(k->value, v->value, eps);
  const Var k_hat = constant(scaled.k), v_hat = constant(scaled.v);
  if (needs_grad({&k, &v}))
    record("key_norm_scale", {k_hat, v_hat}, [k, v, k_hat, v_hat, r = scaled.r] {
      const ops::KeyNormScaleGrads d =
          ops::key_norm_scale_backward(grad_or_zeros(k_hat), grad_or_zeros(v_hat), k->value, v->value, r);
      accumulate_grad(k, d.dk);
      accumulate_grad(v, d.dv);
    });
  // S' + η/(n+ε) k (v − S'ᵀk)ᵀ = S' + η (r k)(r v − S'ᵀ(r k))ᵀ: the gated delta rule with β = η.
  return gated_delta_rule(q, k_hat, v_hat, g, eta, scale, state_in, state_out);
}

}  // namespace primer::ag
