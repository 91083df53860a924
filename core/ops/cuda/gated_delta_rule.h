// CUDA launchers for the chunked gated delta rule (compute stream, no host sync). q, k, v, o and their gradients
// are dense bf16; g, beta, the states and dg, dbeta dense f32. Head dims K = V ∈ {64, 128}. Tensor-core products
// take bf16 operands with fp32 accumulation; the running state and its gradient stay fp32 on chip.
#pragma once
#include <cstddef>

#include "core/ops/gated_delta_rule_dims.h"

namespace primer::ops::cuda_ops {

// Bytes of scratch the forward (backward = false) or the backward needs.
size_t gated_delta_rule_workspace_bytes(const GatedDeltaDims& d, bool backward);

// state_in (null: zeros) and state_out may be null.
void gated_delta_rule_forward(const GatedDeltaDims& d, const void* q, const void* k, const void* v, const float* g,
                              const float* beta, const float* state_in, void* o, float* state_out, void* workspace);

// state_in, dstate_out (zero) and dstate_in may be null. Every gradient is overwritten.
void gated_delta_rule_backward(const GatedDeltaDims& d, const void* dout, const void* q, const void* k, const void* v,
                               const float* g, const float* beta, const float* state_in, const float* dstate_out,
                               void* dq, void* dk, void* dv, float* dg, float* dbeta, float* dstate_in,
                               void* workspace);

}  // namespace primer::ops::cuda_ops
