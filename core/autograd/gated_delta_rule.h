// The gated delta rule (core/ops/gated_delta_rule.h) as one autograd node.
#pragma once
#include "core/autograd/variable.h"

namespace primer::ag {

// o [B, T, H, V] from q, k [B, T, H, K], v, g, beta [B, T, H]; state_in [B, H, K, V] (null: zeros). If state_out is
// non-null it receives S_T, through which a later use's gradient flows back into every input.
Var gated_delta_rule(const Var& q, const Var& k, const Var& v, const Var& g, const Var& beta, double scale,
                     const Var& state_in, Var* state_out);

}  // namespace primer::ag
