// Argument validation shared by ops::chebyshev_solve and its reference (errors name the op and the argument).
#pragma once
#include "core/ops/chebyshev_solve.h"
#include "core/ops/chebyshev_solve_dims.h"

namespace primer::ops {

// q, k, gk, state_in and the options; returns the sizes.
ChebyshevDims chebyshev_check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& gk,
                                     const ChebyshevOptions& options, const Tensor& state_in);
// The backward's extra arguments: dx and x like q, dstate_out (may be undefined) like the state.
void chebyshev_check_backward(const char* op, const ChebyshevDims& d, const Tensor& q, const Tensor& dx,
                              const Tensor& x, const Tensor& dstate_out);

}  // namespace primer::ops
