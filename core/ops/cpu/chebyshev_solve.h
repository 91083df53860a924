// The chunked Chebyshev solve on the CPU (f32/f64): the same maths as the CUDA kernels, written as plain loops.
// Chunks of 64 tokens; per chunk only the chunk-start state H_0 is held, every H_c of the chunk is reached through
// the chunk's keys and cumulative log-decays (chebyshev_solve.cpp derives it). Buffers are dense, shapes
// as in core/ops/chebyshev_solve.h; nullable ones are marked.
#pragma once
#include "core/ops/chebyshev_solve_dims.h"

namespace primer::ops::cpu {

// gk, state_in, state_out may be null.
template <class T> void chebyshev_solve(const ChebyshevDims& d, const T* q, const T* k, const T* gk, const T* state_in,
                                        T* x, T* state_out);

// gk, state_in, dstate_out may be null; dgk (iff gk) and dstate_in (iff state_in) may be null. All outputs are
// overwritten.
template <class T> void chebyshev_solve_backward(const ChebyshevDims& d, const T* dx, const T* x, const T* k,
                                                 const T* gk, const T* state_in, const T* dstate_out, T* dq, T* dk,
                                                 T* dgk, T* dstate_in);

}  // namespace primer::ops::cpu
