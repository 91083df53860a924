// The Hopper (sm_90a, wgmma) flash attention forward; attention_forward() calls it when wgmma_available(). (The
// same file defines attention_forward_two_sources, which has no other kernel.)
#pragma once
#include "core/ops/cuda/attention.h"

namespace primer::ops::cuda_ops {

void attention_forward_wgmma(void* out, float* lse, const void* q, const void* k, const void* v,
                             const AttentionDims& d);

}  // namespace primer::ops::cuda_ops
