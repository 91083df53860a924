// CUDA launchers for the causal depthwise conv1d (compute stream, dense buffers, f32/bf16, fp32 math).
#pragma once
#include <cstddef>

#include "core/dtype.h"
#include "core/ops/conv1d_dims.h"

namespace primer::ops::cuda_ops {

// bias, state_in and state_out may be null; state_out must not alias state_in.
void causal_conv1d(const Conv1dDims& d, DType dtype, const void* x, const void* w, const void* bias, bool silu,
                   const void* state_in, void* y, void* state_out);

// f32 scratch elements causal_conv1d_backward needs: per-block partial sums of the parameter gradients.
size_t causal_conv1d_backward_workspace_floats(const Conv1dDims& d, DType dtype);
// bias, state_in, dstate_out, dbias_accum and dstate_in may be null. dw_accum/dbias_accum (f32) accumulate,
// deterministically: per-block partials over time, then one ordered reduction.
void causal_conv1d_backward(const Conv1dDims& d, DType dtype, const void* dy, const void* x, const void* w,
                            const void* bias, bool silu, const void* state_in, const void* dstate_out, void* dx,
                            float* dw_accum, float* dbias_accum, void* dstate_in, float* workspace);

}  // namespace primer::ops::cuda_ops
