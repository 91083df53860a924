// CUDA launchers of Gated DeltaNet-2's chunked tensor-core kernels (compute stream, no host sync): bf16 q, k, v, o
// with equal key and value head dims of 64 or 128; the gates g, b, w, the states and every gradient but dv in f32.
// The recurrent kernels (gated_delta_rule2.h) cover every other shape and f32 inputs.
#pragma once
#include <cstddef>

#include "core/dtype.h"
#include "core/ops/cuda/gated_delta_rule2.h"

namespace primer::ops::cuda_ops {

bool gated_delta_rule2_chunked_supports(const GatedDelta2Shape& shape, DType dtype);

// Bytes of the workspace one call needs (the backward's is larger: it keeps A, R, dR and the chunk states).
size_t gated_delta_rule2_chunked_workspace_bytes(const GatedDelta2Shape& shape, bool backward);

// state_in (null: zeros) and state_out may be null. With keep_scratch the workspace is the backward's size and
// keeps what the backward would recompute (A, R, the chunk-start states), for a backward with scratch_from_forward.
void gated_delta_rule2_chunked_forward(const GatedDelta2Shape& shape, const void* q, const void* k, const void* v,
                                       const float* g, const float* b, const float* w, const float* state_in,
                                       float scale, void* o, float* state_out, void* workspace, bool keep_scratch);

// dstate_out (null: zero), state_in (null: zeros) and dstate_in may be null. Every gradient is written whole: dq, dk,
// dg, db, dw in f32, dv in bf16.
void gated_delta_rule2_chunked_backward(const GatedDelta2Shape& shape, const void* dout, const float* dstate_out,
                                        const void* q, const void* k, const void* v, const float* g, const float* b,
                                        const float* w, const float* state_in, float scale, float* dq, float* dk,
                                        void* dv, float* dg, float* db, float* dw, float* dstate_in, void* workspace,
                                        bool scratch_from_forward);

}  // namespace primer::ops::cuda_ops
