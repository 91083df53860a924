// Gated KalmaNet's Chebyshev solve on the tape (see core/ops/chebyshev_solve.h): one node for x and, if asked,
// the final state H_T, so that gradients flow into q, k, gk and an initial state, and out of a final state that a
// later use (the next chunk of a sequence, a decode step) gives a gradient.
#pragma once
#include "core/autograd/variable.h"
#include "core/ops/chebyshev_solve.h"

namespace primer::ag {

// q, k [B, T, H, K]; gk [B, T, H] log decay (null Var: no decay); state_in [B, H, K, K] (null Var: zeros).
// Returns x [B, T, H, K]; if state_out is non-null it receives H_T. The backward is the implicit one of the op,
// with the options (num_iter included) of this call.
Var chebyshev_solve(const Var& q, const Var& k, const Var& gk, const ops::ChebyshevOptions& options,
                    const Var& state_in, Var* state_out);

}  // namespace primer::ag
