// The gated delta rule-2 (Gated DeltaNet-2's core, core/ops/gated_delta_rule2.h) as one autograd node.
#pragma once
#include "core/autograd/variable.h"

namespace primer::ag {

// o [B, T, H, V] from q, k, g, b [B, T, H, K], v, w [B, T, H, V]; state_in [B, H, K, V] (null: zeros). If state_out
// is non-null it receives S_T, through which a later use's gradient flows back into every input.
Var gated_delta_rule2(const Var& q, const Var& k, const Var& v, const Var& g, const Var& b, const Var& w, double scale,
                      const Var& state_in, Var* state_out);

}  // namespace primer::ag
