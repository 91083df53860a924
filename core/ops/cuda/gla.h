// CUDA launchers for scalar-gated linear attention, chunked (compute stream, no host sync). q, k [B, T, H, K] and
// v, dout [B, T, H, V] are bf16 (the tensor cores' operand type: the op rounds f32 inputs to bf16 before calling),
// dense; g [B, T, H] and states [B, H, K, V] are f32; K and V are 64 or 128. Outputs o, dq, dk, dv are written in
// `out_dtype` (bf16 or f32) from fp32 accumulators; the running state and its gradient are fp32.
#pragma once
#include <cstddef>

#include "core/dtype.h"
#include "core/ops/gla_dims.h"

namespace primer::ops::cuda_ops {

// Device scratch (bytes) of gla_forward and gla_backward: the bf16 state at every chunk boundary (and, for the
// backward, the bf16 gradient wrt every chunk's final state).
size_t gla_forward_workspace_bytes(const GlaDims& d);
size_t gla_backward_workspace_bytes(const GlaDims& d);

// o [B, T, H, V] in out_dtype; state_in and state_out may be null.
void gla_forward(const GlaDims& d, DType out_dtype, const void* q, const void* k, const void* v, const float* g,
                 float scale, const float* state_in, void* o, float* state_out, void* workspace);

// dq, dk, dv in out_dtype and dg (f32) are overwritten; state_in, dstate_out and dstate_in may be null.
void gla_backward(const GlaDims& d, DType out_dtype, const void* dout, const void* q, const void* k, const void* v,
                  const float* g, float scale, const float* state_in, const float* dstate_out, void* dq, void* dk,
                  void* dv, float* dg, float* dstate_in, void* workspace);

}  // namespace primer::ops::cuda_ops
