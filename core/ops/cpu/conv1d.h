// CPU causal depthwise conv1d (f32/f64): the fp64 reference. All buffers dense; nullable ones are marked.
#pragma once
#include "core/ops/conv1d_dims.h"

namespace primer::ops::cpu {

// bias, state_in, state_out may be null.
template <class T> void causal_conv1d(const Conv1dDims& d, const T* x, const T* w, const T* bias, bool silu,
                                      const T* state_in, T* y, T* state_out);

// bias, state_in, dstate_out, dbias_accum, dstate_in may be null; dw_accum/dbias_accum accumulate.
template <class T> void causal_conv1d_backward(const Conv1dDims& d, const T* dy, const T* x, const T* w, const T* bias,
                                               bool silu, const T* state_in, const T* dstate_out, T* dx, T* dw_accum,
                                               T* dbias_accum, T* dstate_in);

}  // namespace primer::ops::cpu
