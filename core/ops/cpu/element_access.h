// Reading and writing one element of any dtype as float/double on the CPU, and strided index walking.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/ops/kernel_args.h"

namespace primer::ops::cpu {

template <class T> inline double load_as_double(const void* p, int64_t i) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
    return double(float(static_cast<const T*>(p)[i]));
  else
    return double(static_cast<const T*>(p)[i]);
}

template <class T> inline void store_from_double(void* p, int64_t i, double v) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
    static_cast<T*>(p)[i] = T(float(v));
  else
    static_cast<T*>(p)[i] = T(v);
}

// Element offset (in elements) of the n-th element in row-major order of a strided view.
inline int64_t strided_offset(const StridedDesc& d, int64_t n) {
  int64_t off = 0;
  for (int i = d.ndim - 1; i >= 0; --i) {
    const int64_t idx = n % d.shape[i];
    n /= d.shape[i];
    off += idx * d.strides[i];
  }
  return off;
}

// Calls f(T{}) with T the storage type of dtype.
template <class F> decltype(auto) visit_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::BF16: return f(bf16{});
    case DType::F16: return f(f16{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::U8: return f(uint8_t{});
  }
  return f(float{});
}

}  // namespace primer::ops::cpu
