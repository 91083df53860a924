// Scalar-gated linear attention on the tape (see core/ops/gla.h): one node for the outputs o and, if asked, the
// final state, so that gradients flow into q, k, v, g and an initial state, and out of a final state that a later
// use (the next chunk of a sequence, a decode step) gives a gradient.
#pragma once
#include <optional>

#include "core/autograd/variable.h"
#include "core/ops/gla.h"

namespace primer::ag {

// q, k [B, T, H, K]; v [B, T, H, V]; g [B, T, H] log decay; state_in [B, H, K, V] (null Var: zeros). Returns
// o [B, T, H, V] (in v's dtype, or out_dtype as ops::gla allows); if state_out is non-null it receives S_T.
// operands: the kernels' operands that q's, k's and v's producers formed (ops::gla's; CUDA), kept for the backward with
// those the forward forms.
Var gla(const Var& q, const Var& k, const Var& v, const Var& g, double scale, const Var& state_in, Var* state_out,
        std::optional<DType> out_dtype = std::nullopt, ops::GlaOperands operands = {});

}  // namespace primer::ag
