// CUDA launchers of the chunked Chebyshev solve (compute stream, no host sync). q, k, dx, x, dq, dk: dense
// [B, T, H, D] bf16 or f32 (`dtype`); gk, dgk [B, T, H] f32; states [B, H, D, D] f32; head_dim 64 or 128.
// Tensor-core operands are bf16 (f32 keys are rounded to bf16 as operands); the chunk-start states enter the
// products as a hi + lo pair of bf16, so the state's own rounding does not limit the solve; iterates, decays,
// norms and accumulators are f32. In f32 the backward's products with x, the adjoint s and the state gradient Ĥ
// take them as hi + lo pairs too: at a small ridge x and s are up to κ = (1 + ridge)/ridge times larger off the keys'
// span than along it, and dk and dgk keep only the part along it (dots with the keys), which one bf16 of x or s
// would leave up to κ · 2^-9 off.
#pragma once
#include <cstddef>

#include "core/dtype.h"
#include "core/ops/chebyshev_solve_dims.h"

namespace primer::ops::cuda_ops {

// f32 scratch elements each direction needs. The forward's scratch is the chunk-start states, [BH][N+1][D][D],
// which the backward may take instead of recomputing them.
size_t chebyshev_forward_workspace_floats(const ChebyshevDims& d);
size_t chebyshev_backward_workspace_floats(const ChebyshevDims& d, bool states_given);

// gk, state_in, state_out may be null.
void chebyshev_solve(const ChebyshevDims& d, DType dtype, const void* q, const void* k, const float* gk,
                     const float* state_in, void* x, float* state_out, float* workspace);

// gk, state_in, dstate_out may be null; dgk is written iff gk is given, dstate_in iff it is non-null. states: the
// forward's workspace after it ran on the same inputs, or null (recomputed into the workspace).
void chebyshev_solve_backward(const ChebyshevDims& d, DType dtype, const void* dx, const void* x, const void* k,
                              const float* gk, const float* state_in, const float* dstate_out, const float* states,
                              void* dq, void* dk, float* dgk, float* dstate_in, float* workspace);

}  // namespace primer::ops::cuda_ops
