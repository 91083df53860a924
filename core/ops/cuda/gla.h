// CUDA launchers for scalar-gated linear attention, chunked (compute stream, no host sync). q, k [B, T, H, K] and
// v, dout [B, T, H, V] are bf16 (the tensor cores' operand type: the op rounds f32 keys, values and output gradients
// to bf16 before calling, and splits an f32 query), dense; g [B, T, H] and states [B, H, K, V] are f32; K and V are
// 64 or 128. Outputs o, dq, dk, dv are written in `out_dtype` from fp32 accumulators: bf16, or f32 with a precise
// query (and only then; its o may also be bf16); the running state and its gradient are fp32.
//
// A precise query (GlaQuery::lo non-null) enters every product as hi + lo bf16 (~16 significant bits; the op splits
// an f32 q), and dq is written in f32. Gated KalmaNet reads out q̃ = (1 − α) q + α x̂, whose components along the
// keys, the only ones the readout sees, are up to κ times smaller than the rest: one bf16 of q̃ would be up to
// κ · 2^-9 off there. Whatever meets q̃'s large part is then kept as hi + lo too: the chunk-start states S_c (their
// rounding, off the keys' span, times that part is as large), and the gradient wrt them (a sum of q̃ doᵀ, large off
// the span in the same way); the scans weight the values, not the keys or queries, to leave those unrounded.
#pragma once
#include <cstddef>

#include "core/dtype.h"
#include "core/ops/gla_dims.h"

namespace primer::ops::cuda_ops {

// The query: bf16 [B, T, H, K], and for a precise query its rounding residual lo = bf16(q − hi) (else null).
struct GlaQuery {
  const void* hi;
  const void* lo;
};

// Device scratch (bytes) of gla_forward and gla_backward: the bf16 state at every chunk boundary (and, for the
// backward, the bf16 gradient wrt every chunk's final state), each with its residual for a precise query.
size_t gla_forward_workspace_bytes(const GlaDims& d, bool precise_query);
size_t gla_backward_workspace_bytes(const GlaDims& d, bool precise_query);

// o [B, T, H, V] in out_dtype; state_in and state_out may be null.
void gla_forward(const GlaDims& d, DType out_dtype, GlaQuery q, const void* k, const void* v, const float* g,
                 float scale, const float* state_in, void* o, float* state_out, void* workspace);

// dq, dk, dv in out_dtype and dg (f32) are overwritten; state_in, dstate_out and dstate_in may be null.
void gla_backward(const GlaDims& d, DType out_dtype, const void* dout, GlaQuery q, const void* k, const void* v,
                  const float* g, float scale, const float* state_in, const float* dstate_out, void* dq, void* dk,
                  void* dv, float* dg, float* dstate_in, void* workspace);

}  // namespace primer::ops::cuda_ops
