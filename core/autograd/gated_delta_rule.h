// The gated delta rule (core/ops/gated_delta_rule.h) as one autograd node.
#pragma once
#include "core/autograd/variable.h"

namespace primer::ag {

// o [B, T, H, V] from q, k [B, T, H, K], v, g, beta [B, T, H]; state_in [B, H, K, V] (null: zeros). If state_out is
// non-null it receives S_T, through which a later use's gradient flows back into every input. raw_key_eps ≥ 0: k
// and v are raw, each token's pair divided by sqrt(‖k‖² + raw_key_eps) inside the op (ops::gated_delta_rule).
Var gated_delta_rule(const Var& q, const Var& k, const Var& v, const Var& g, const Var& beta, double scale,
                     const Var& state_in, Var* state_out, double raw_key_eps = -1);

}  // namespace primer::ag
