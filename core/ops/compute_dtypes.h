// Argument check shared by the floating-point ops: which dtypes each device computes on.
#pragma once
#include "core/ops/dispatch.h"

namespace primer::ops {

// CPU: f32 and f64 (f64 is the reference); CUDA: f32 and bf16 storage with fp32 math.
inline void expect_float(const Tensor& t, const char* op, const char* arg, Device device) {
  if (device.is_cpu()) expect(t, op, arg, device, {DType::F32, DType::F64});
  else expect(t, op, arg, device, {DType::F32, DType::BF16});
}

}  // namespace primer::ops
