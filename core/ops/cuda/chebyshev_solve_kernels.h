// The chunked Chebyshev-solve kernels behind cuda/chebyshev_solve.h, one launcher each (nvcc-only, internal).
// Workspace layouts: states [BH][N+1][D][D] (the state before chunk n; n = N: after the last token), dstates
// [BH][N][D][D] (the gradient wrt the last state of chunk n), per-row scalars [BH][N][64], hdot [BH][N][tiles].
#pragma once
#include "core/dtype.h"
#include "core/ops/chebyshev_solve_dims.h"

namespace primer::ops::cuda_ops::cheb {

// Number of 64 x 64 tiles of a D x D state.
inline int state_tiles(const ChebyshevDims& d) { return int((d.dim / 64) * (d.dim / 64)); }

// Forward scan over chunks: states[n] for n = 0..N from state_in (null: zeros); also state_out if non-null.
void launch_chunk_states(const ChebyshevDims& d, DType dtype, const void* k, const float* gk, const float* state_in,
                         float* states, float* state_out);

// Per chunk, X = CH(H_c + λ_c I, rhs) for every row into out (dtype). With x non-null (the backward's adjoint
// solve, rhs = dx, out = dq) it also writes, per row, W (the nested B-recursion's weights) and u = −s·(H x) −
// ½w‖H‖_F² for the gate gradient.
void launch_iterate(const ChebyshevDims& d, DType dtype, const void* rhs, const void* k, const float* gk,
                    const float* states, void* out, const void* x, float* W, float* u);

// Reverse scan over chunks of the state gradient: dstates[n], hdot[n] = ⟨dstates[n], states[n+1]⟩ per tile, and
// dstate_in (if non-null) from dstate_out (null: zeros). s null: num_iter = 0 (no local state gradient).
void launch_state_gradients(const ChebyshevDims& d, DType dtype, const void* s, const void* x, const void* k,
                            const float* gk, const float* W, const float* states, const float* dstate_out,
                            float* dstates, float* hdot, float* dstate_in);

// Per chunk: dk (dtype) and, if gk is non-null, dgk.
void launch_key_gradients(const ChebyshevDims& d, DType dtype, const void* s, const void* x, const void* k,
                          const float* gk, const float* states, const float* dstates, const float* W, const float* u,
                          const float* hdot, void* dk, float* dgk);

}  // namespace primer::ops::cuda_ops::cheb
