// Causal depthwise convolution over time: the short convolution of SSM layers (K = 2..8 taps, usually 4),
// with an optional bias and SiLU, and a carried state so that chunked calls chain exactly.
#pragma once
#include "core/tensor.h"

namespace primer::ops {

// x [B, T, C] (CPU f32/f64, CUDA f32/bf16); w [C, K]: y[t] = sum_k w[c, k] * x[t - (K-1) + k], tap K-1 on the
// current token; bias [C] or undefined; silu applies SiLU after the bias. state_in [B, C, K-1] = the K-1 inputs
// before x (oldest first), undefined = zeros. w, bias and state_in have x's dtype. If state_out != nullptr it
// receives a new [B, C, K-1]: the last K-1 inputs (reaching into state_in when T < K-1).
Tensor causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& bias, bool silu, const Tensor& state_in,
                     Tensor* state_out);

// causal_conv1d, then each head of head_dim channels of its output L2-normalised per token, as
// ops::rmsnorm(y viewed [B, T, C / head_dim, head_dim], unit weight, NormSpec{eps, None, l2}) would (the norm reading
// the conv's output in x's dtype): on CUDA in the conv's own pass where cuda_ops::causal_conv1d_fuses_head_norm
// allows (needs silu), else the two ops in turn. *rstd_out receives the per-row r, [B·T·C / head_dim] (f32; f64 for
// f64), for the norm's backward from this output (ops::rmsnorm_backward with NormSpec::from_output).
Tensor causal_conv1d_l2(const Tensor& x, const Tensor& w, const Tensor& bias, bool silu, const Tensor& state_in,
                        Tensor* state_out, int64_t head_dim, double eps, Tensor* rstd_out);

// Returns dx [B, T, C]. dw_accum [C, K] and dbias_accum [C] (f32; f64 for f64 inputs; dbias_accum may be undefined)
// accumulate +=. dstate_out [B, C, K-1] (may be undefined) is the gradient flowing into state_out; if
// dstate_in != nullptr it receives a new [B, C, K-1], the gradient wrt state_in.
Tensor causal_conv1d_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu,
                              const Tensor& state_in, const Tensor& dstate_out, const Tensor& dw_accum,
                              const Tensor& dbias_accum, Tensor* dstate_in);

}  // namespace primer::ops
