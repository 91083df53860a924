#include "core/autograd/kaczmarz_delta_rule.h"

#include "core/autograd/functions.h"
#include "core/autograd/gated_delta_rule.h"
#include "core/check.h"

namespace primer::ag {

Var kaczmarz_delta_rule(const Var& q, const Var& k, const Var& v, const Var& g, const Var& eta, double scale,
                        double eps, const Var& state_in, Var* state_out) {
  PRIMER_CHECK(k && k->value.dim() == 4, "kaczmarz_delta_rule: k is {}, expected [B, T, H, K]",
               k ? k->value.describe() : "null");
  PRIMER_CHECK(eps >= 0, "kaczmarz_delta_rule: eps is {}, expected ≥ 0", eps);
  // r = 1/sqrt(‖k‖² + ε) [B, T, H, 1] and the products r·k, r·v in the gate dtype (f32; f64 in references): ε = 1e-6
  // is far below bf16's resolution of ‖k‖², and bf16 inputs are rounded once, on the way into the core.
  const DType gate_dtype = g->value.dtype(), io_dtype = k->value.dtype();
  const Device device = k->value.device();
  const Var k_wide = cast(k, gate_dtype);
  const Var ones = constant(Tensor::full({1, k->value.size(3)}, 1.0, gate_dtype, device));
  const Var norm2 = linear(unary(ops::Unary::Square, k_wide), ones);
  const Var r = unary(ops::Unary::Rsqrt, add(norm2, constant(Tensor::full({1}, eps, gate_dtype, device))));
  const Var unit_k = cast(mul(k_wide, r), io_dtype), scaled_v = cast(mul(cast(v, gate_dtype), r), io_dtype);
  // S' + η/(n+ε) k (v − S'ᵀk)ᵀ = S' + η (r k)(r v − S'ᵀ(r k))ᵀ: the gated delta rule with β = η.
  return gated_delta_rule(q, unit_k, scaled_v, g, eta, scale, state_in, state_out);
}

}  // namespace primer::ag
