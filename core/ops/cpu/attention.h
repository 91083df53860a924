// CPU attention (f32/f64; the f64 path is the reference), written straight from softmax(Q K^T * scale + mask) V.
// Tensors are contiguous and already validated; shapes as in core/ops/attention.h.
#pragma once
#include "core/ops/attention.h"

namespace primer::ops::cpu {

// out [B, Tq, Hq, Dh], lse [B, Hq, Tq]; `scale` already resolved.
void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionOptions& opt);
// dq like q, dk/dv like k/v (overwritten).
void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const AttentionOptions& opt);

}  // namespace primer::ops::cpu
