// Argument checks shared by the row/elementwise ops (RMSNorm, RoPE, SwiGLU).
#pragma once
#include "core/ops/dispatch.h"

namespace primer::ops {

// Floating inputs of these ops: f32/f64 on the CPU (f64 is the reference path), f32/bf16 on CUDA.
inline void expect_float_io(const Tensor& t, const char* op, const char* arg) {
  PRIMER_CHECK(t.defined(), "{}: argument '{}' is undefined", op, arg);
  if (t.is_cpu())
    expect(t, op, arg, t.device(), {DType::F32, DType::F64});
  else
    expect(t, op, arg, t.device(), {DType::F32, DType::BF16});
}

// Statistics and parameter-gradient accumulators: f64 alongside f64 inputs, f32 otherwise.
inline DType accum_dtype(DType input) { return input == DType::F64 ? DType::F64 : DType::F32; }

}  // namespace primer::ops
