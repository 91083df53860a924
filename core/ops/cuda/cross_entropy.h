// CUDA row kernels of the fused linear + cross-entropy (compute stream, no host synchronisation).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

// logits [rows, V] f32 (contiguous) -> grad [rows, V] (grad_type f32 or bf16; may alias logits when f32) =
// grad_scale * (softmax - onehot(target)); row_loss[r] = logsumexp - logit[target]. Ignored rows: zeros.
// A target outside [0, V) that is not ignore_index yields NaN loss and gradient for its row (no host check).
void xent_rows(const float* logits, DType grad_type, void* grad, const int32_t* targets, int64_t rows, int64_t vocab,
               int64_t ignore_index, float grad_scale, float* row_loss);
// out[0] = sum of row_loss[0..n) in a fixed order (deterministic), accumulated in f64.
void sum_losses(const float* row_loss, int64_t n, float* out);

}  // namespace primer::ops::cuda_ops
