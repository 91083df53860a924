// CPU row kernels of the fused linear + cross-entropy (f32 or f64 logits).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cpu {

// logits [rows, V] (contiguous, dtype dt) become grad_scale * (softmax - onehot(target)) in place; row_loss[r] =
// logsumexp - logit[target]. Rows whose target == ignore_index get zero gradient and zero loss.
void xent_rows(DType dt, void* logits, const int32_t* targets, int64_t rows, int64_t vocab, int64_t ignore_index,
               double grad_scale, void* row_loss);
// out[0] = sum of row_loss[0..n) (dtype dt).
void sum_losses(DType dt, const void* row_loss, int64_t n, void* out);

}  // namespace primer::ops::cpu
