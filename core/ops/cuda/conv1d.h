// CUDA launchers for the causal depthwise conv1d (compute stream, dense buffers, f32/bf16, fp32 math).
#pragma once
#include <cstddef>

#include "core/dtype.h"
#include "core/ops/conv1d_dims.h"

namespace primer::ops::cuda_ops {

// Each head of head_dim output channels L2-normalised in the conv's own pass (head_dim 0: none): per token and head
// y = u·r, r = 1/sqrt(Σu² + eps) over the head's outputs u (rounded to the output dtype first, as a norm reading
// them would), r into rstd f32 [B, T, C / head_dim].
struct ConvHeadNorm {
  int head_dim = 0;
  float eps = 0.f;
  float* rstd = nullptr;
};
// Whether the conv's pass can normalise heads of head_dim channels: a head's channels in whole 16-byte packs of
// 2..32 threads of a warp (a power of two), every head whole.
bool causal_conv1d_fuses_head_norm(const Conv1dDims& d, DType dtype, const void* x, const void* y, int head_dim);

// bias, state_in and state_out may be null; state_out must not alias state_in. A head norm needs silu and
// causal_conv1d_fuses_head_norm.
void causal_conv1d(const Conv1dDims& d, DType dtype, const void* x, const void* w, const void* bias, bool silu,
                   const void* state_in, void* y, void* state_out, const ConvHeadNorm& head_norm = {});

// f32 scratch elements causal_conv1d_backward needs: per-block partial sums of the parameter gradients.
size_t causal_conv1d_backward_workspace_floats(const Conv1dDims& d, DType dtype);
// bias, state_in, dstate_out, dbias_accum and dstate_in may be null. dw_accum/dbias_accum (f32) accumulate,
// deterministically: per-block partials over time, then one ordered reduction.
void causal_conv1d_backward(const Conv1dDims& d, DType dtype, const void* dy, const void* x, const void* w,
                            const void* bias, bool silu, const void* state_in, const void* dstate_out, void* dx,
                            float* dw_accum, float* dbias_accum, void* dstate_in, float* workspace);

}  // namespace primer::ops::cuda_ops
