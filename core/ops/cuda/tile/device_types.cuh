// Device-side element types and conversions shared by primer's kernels.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

template <class T> __device__ __forceinline__ float to_float(T v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <class T> __device__ __forceinline__ T from_float(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }

template <class T> __device__ __forceinline__ double to_double(T v) { return static_cast<double>(to_float(v)); }
template <> __device__ __forceinline__ double to_double(double v) { return v; }
template <> __device__ __forceinline__ double to_double(int64_t v) { return static_cast<double>(v); }
template <> __device__ __forceinline__ double to_double(int32_t v) { return static_cast<double>(v); }
template <class T> __device__ __forceinline__ T from_double(double v) { return from_float<T>(static_cast<float>(v)); }
template <> __device__ __forceinline__ double from_double(double v) { return v; }
template <> __device__ __forceinline__ int64_t from_double(double v) { return static_cast<int64_t>(v); }
template <> __device__ __forceinline__ int32_t from_double(double v) { return static_cast<int32_t>(v); }

// Calls f(T{}) with T the device storage type of dtype.
template <class F> void visit_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    case DType::BF16: f(__nv_bfloat16{}); break;
    case DType::F16: f(__half{}); break;
    case DType::I32: f(int32_t{}); break;
    case DType::I64: f(int64_t{}); break;
    case DType::U8: f(uint8_t{}); break;
  }
}

// Calls f(T{}) for the floating types kernels compute on: f32 and bf16 (fp32 math inside).
template <class F> void visit_float(DType dt, F&& f) {
  if (dt == DType::BF16)
    f(__nv_bfloat16{});
  else if (dt == DType::F16)
    f(__half{});
  else
    f(float{});
}

inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 32) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < max_blocks ? (b > 0 ? b : 1) : max_blocks);
}

}  // namespace primer::ops::cuda_ops
