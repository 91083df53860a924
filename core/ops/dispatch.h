// Helpers for op entry points: argument validation messages and dtype dispatch.
#pragma once
#include <utility>

#include "core/check.h"
#include "core/ops/kernel_args.h"
#include "core/tensor.h"

// Wraps a call into a CUDA launcher; in CPU-only builds the call is compiled out and fails clearly.
#ifdef PRIMER_WITH_CUDA
#define PRIMER_ON_CUDA(...) __VA_ARGS__
#else
#define PRIMER_ON_CUDA(...) ::primer::ops::fail_no_cuda()
#endif

namespace primer::ops {

[[noreturn]] void fail_no_cuda();

StridedDesc strided_desc(const Tensor& t);

// Fails unless `t` is defined, on `device`, and of one of the listed dtypes; names the op and argument.
void expect(const Tensor& t, const char* op, const char* arg, Device device, std::initializer_list<DType> dtypes);
void expect_shape(const Tensor& t, const char* op, const char* arg, const Shape& shape);

// The floating dtypes each device computes on: f32/f64 on the CPU (f64 is the reference path), f32/bf16 storage
// with fp32 math on CUDA.
inline void expect_float(const Tensor& t, const char* op, const char* arg, Device device) {
  if (device.is_cpu())
    expect(t, op, arg, device, {DType::F32, DType::F64});
  else
    expect(t, op, arg, device, {DType::F32, DType::BF16});
}

// t's data, or null for an undefined (optional) tensor.
template <class T> T* data_or_null(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

// Statistics and parameter-gradient accumulators: f64 alongside f64 inputs, f32 otherwise.
inline DType accum_dtype(DType input) { return input == DType::F64 ? DType::F64 : DType::F32; }

// Calls f(T{}) with T the C++ type of a floating dtype computed on the CPU (f32 or f64).
template <class F> decltype(auto) dispatch_cpu_float(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    default: PRIMER_FAIL("{}: CPU path computes in f32 or f64, got {}", op, dtype_name(dt));
  }
}

}  // namespace primer::ops
