// CPU gated delta rule: the token-by-token f64 reference (ground truth, hand-written backward) and the chunked WY
// algorithm (f32/f64) that the CUDA kernels implement. Dense buffers in the layouts of gated_delta_rule_dims.h;
// nullable pointers are marked.
#pragma once
#include "core/ops/gated_delta_rule_dims.h"

namespace primer::ops::cpu {

// state_in (null: zeros) and state_out may be null.
void gated_delta_rule_reference(const GatedDeltaDims& d, const double* q, const double* k, const double* v,
                                const double* g, const double* beta, const double* state_in, double* o,
                                double* state_out);
// Gradients of <dout, o> + <dstate_out, S_T>; state_in, dstate_out (zero) and dstate_in may be null.
void gated_delta_rule_reference_backward(const GatedDeltaDims& d, const double* dout, const double* q, const double* k,
                                         const double* v, const double* g, const double* beta, const double* state_in,
                                         const double* dstate_out, double* dq, double* dk, double* dv, double* dg,
                                         double* dbeta, double* dstate_in);

// The chunked algorithm (chunks of 64 tokens, the last one partial). Same contract as the reference.
template <class T> void gated_delta_rule_chunked(const GatedDeltaDims& d, const T* q, const T* k, const T* v,
                                                 const T* g, const T* beta, const T* state_in, T* o, T* state_out);
template <class T> void gated_delta_rule_chunked_backward(const GatedDeltaDims& d, const T* dout, const T* q,
                                                          const T* k, const T* v, const T* g, const T* beta,
                                                          const T* state_in, const T* dstate_out, T* dq, T* dk, T* dv,
                                                          T* dg, T* dbeta, T* dstate_in);

}  // namespace primer::ops::cpu
