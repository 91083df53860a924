#include "core/autograd/kaczmarz_delta_rule.h"

#include "core/autograd/gated_delta_rule.h"
#include "core/check.h"

namespace primer::ag {

Var kaczmarz_delta_rule(const Var& q, const Var& k, const Var& v, const Var& g, const Var& eta, double scale,
                        double eps, const Var& state_in, Var* state_out) {
  PRIMER_CHECK(k && k->value.dim() == 4, "kaczmarz_delta_rule: k is {}, expected [B, T, H, K]",
               k ? k->value.describe() : "null");
  PRIMER_CHECK(eps >= 0, "kaczmarz_delta_rule: eps is {}, expected ≥ 0", eps);
  // S' + η/(n+ε) k (v − S'ᵀk)ᵀ = S' + η (r k)(r v − S'ᵀ(r k))ᵀ with r = 1/sqrt(‖k‖² + ε): the gated delta rule with
  // β = η on k̂ = r·k and v̂ = r·v, which the op forms itself from the raw k and v (its raw_key_eps; on CUDA inside
  // the kernels), returning the raw k's and v's gradients.
  return gated_delta_rule(q, k, v, g, eta, scale, state_in, state_out, eps);
}

}  // namespace primer::ag
