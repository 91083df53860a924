// Argument validation shared by ops::gla, its backward and the f64 reference (errors name the op, the argument,
// what it got and what was expected).
#pragma once
#include "core/ops/gla_dims.h"
#include "core/tensor.h"

namespace primer::ops {

// Checks q, k, v, g and state_in (undefined allowed) against the contract of core/ops/gla.h and returns the sizes.
GlaDims check_gla_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                         double scale, const Tensor& state_in);
// The output dtypes gla allows for v: v's own, and bf16 beside f32 on CUDA.
void check_gla_output_dtype(const char* op, const Tensor& v, DType out_dtype, const char* what);
// Checks the backward's extra inputs: dout shaped like v in an output dtype, dstate_out (undefined allowed) like the
// state.
void check_gla_output_grads(const char* op, const GlaDims& d, const Tensor& v, const Tensor& dout,
                            const Tensor& dstate_out);
// The dtype of states: f64 beside f64 inputs, f32 otherwise.
DType gla_state_dtype(const Tensor& q);

}  // namespace primer::ops
