// Fused LM head + cross-entropy: never materialises the [N, V] logits at once.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace primer::ops {

// x [N, D] final hidden states, W [V, D] (HF lm_head / tied embedding, dtype of x), targets i32 [N]; targets equal
// to ignore_index contribute nothing. Returns loss_sum [1] (f32; f64 for f64) = sum over kept tokens of
// logsumexp(x W^T) - logit[target]. Gradients are of grad_scale * loss_sum: *dx = new [N, D] (dtype of x) when
// dx != nullptr; dW_accum [V, D] (f32; f64 for f64) += when defined. Rows go in chunks of chunk_tokens: fp32 logits
// by GEMM, a row kernel turning them into grad_scale * (softmax - onehot), then the dx and dW GEMMs.
// CPU: f32/f64. CUDA: bf16/f32 with fp32 logits. No host sync: grad_scale (e.g. 1 / kept tokens) comes from the caller.
Tensor fused_linear_cross_entropy(const Tensor& x, const Tensor& W, const Tensor& targets, int64_t ignore_index,
                                  double grad_scale, Tensor* dx, const Tensor& dW_accum, int64_t chunk_tokens = 4096);

}  // namespace primer::ops
