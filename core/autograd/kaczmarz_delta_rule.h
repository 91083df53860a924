// Kaczmarz linear attention's core (core/ops/kaczmarz_delta_rule.h) on the autograd tape: the gated delta rule's node
// with raw keys (ops::gated_delta_rule's raw_key_eps), so the chunked CPU path and the CUDA kernels of Gated DeltaNet
// run it, the key-norm scaling and its gradient inside the op.
#pragma once
#include "core/autograd/variable.h"

namespace primer::ag {

// o [B, T, H, V] from q, raw k [B, T, H, K], v [B, T, H, V], g, eta [B, T, H] (in the gate dtype: f32, f64 in
// references) and state_in [B, H, K, V] (null: zeros); with β = η / (‖k‖² + eps). *state_out (if non-null) receives
// S_T, through which a later use's gradient flows back into every input.
Var kaczmarz_delta_rule(const Var& q, const Var& k, const Var& v, const Var& g, const Var& eta, double scale,
                        double eps, const Var& state_in, Var* state_out);

}  // namespace primer::ag
