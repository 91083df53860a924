// The chunked Chebyshev solve on CUDA, as a sequence of kernels (chebyshev_solve_kernels.h):
//   forward:  chunk-start states (sequential over chunks) → the iteration of every chunk (parallel)
//   backward: chunk-start states again → the adjoint solve with W, u → the state gradient (reverse over chunks)
//             → dk, dgk per chunk (parallel)
// The backward takes the forward's chunk-start states (D² floats per chunk and head) when its caller kept them, and
// recomputes them otherwise.
#include "core/cuda_runtime.h"
#include "core/ops/cuda/chebyshev_solve.h"
#include "core/ops/cuda/chebyshev_solve_kernels.h"

namespace primer::ops::cuda_ops {
namespace {

size_t states_floats(const ChebyshevDims& d) { return size_t(d.heads_total() * (d.chunks() + 1) * d.dim * d.dim); }
size_t dstates_floats(const ChebyshevDims& d) { return size_t(d.heads_total() * d.chunks() * d.dim * d.dim); }
size_t rows_floats(const ChebyshevDims& d) { return size_t(d.heads_total() * d.chunks() * ChebyshevDims::kChunk); }
size_t hdot_floats(const ChebyshevDims& d) { return size_t(d.heads_total() * d.chunks() * cheb::state_tiles(d)); }

void copy_on_stream(void* dst, const void* src, const ChebyshevDims& d, DType dtype) {
  const size_t bytes = size_t(d.batch * d.time * d.heads * d.dim) * dtype_size(dtype);
  PRIMER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda::stream()));
}

}  // namespace

size_t chebyshev_forward_workspace_floats(const ChebyshevDims& d) { return states_floats(d); }

size_t chebyshev_backward_workspace_floats(const ChebyshevDims& d, bool states_given) {
  return (states_given ? 0 : states_floats(d)) + dstates_floats(d) + 2 * rows_floats(d) + hdot_floats(d);
}

void chebyshev_solve(const ChebyshevDims& d, DType dtype, const void* q, const void* k, const float* gk,
                     const float* state_in, void* x, float* state_out, float* workspace) {
  if (d.num_iter == 0) {
    copy_on_stream(x, q, d, dtype);  // no solve: x = q
    if (state_out) cheb::launch_chunk_states(d, dtype, k, gk, state_in, workspace, state_out);
    return;
  }
  cheb::launch_chunk_states(d, dtype, k, gk, state_in, workspace, state_out);
  cheb::launch_iterate(d, dtype, q, k, gk, workspace, x, nullptr, nullptr, nullptr);
}

void chebyshev_solve_backward(const ChebyshevDims& d, DType dtype, const void* dx, const void* x, const void* k,
                              const float* gk, const float* state_in, const float* dstate_out, const float* states,
                              void* dq, void* dk, float* dgk, float* dstate_in, float* workspace) {
  float* rest = workspace;
  if (!states) {  // recomputed at the workspace's start, where the kernels' vector loads find it aligned
    cheb::launch_chunk_states(d, dtype, k, gk, state_in, workspace, nullptr);
    states = workspace;
    rest = workspace + states_floats(d);
  }
  float* dstates = rest;
  float* W = dstates + dstates_floats(d);
  float* u = W + rows_floats(d);
  float* hdot = u + rows_floats(d);
  const bool solve = d.num_iter > 0;
  if (solve) {
    cheb::launch_iterate(d, dtype, dx, k, gk, states, dq, x, W, u);
  } else {  // x = q: dq = dx, and the state receives only dstate_out
    copy_on_stream(dq, dx, d, dtype);
    PRIMER_CUDA_CHECK(cudaMemsetAsync(W, 0, 2 * rows_floats(d) * sizeof(float), cuda::stream()));
  }
  const void* s = solve ? dq : nullptr;
  cheb::launch_state_gradients(d, dtype, s, x, k, gk, W, states, dstate_out, dstates, hdot, dstate_in);
  cheb::launch_key_gradients(d, dtype, s, x, k, gk, states, dstates, W, u, hdot, dk, dgk);
}

}  // namespace primer::ops::cuda_ops
