// Packs of N elements moved in one memory instruction (16 bytes when N * sizeof(T) == 16), widened to fp32 —
// the vectorised loads/stores of the RMSNorm, RoPE and SwiGLU kernels.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "core/ops/cuda/device_types.cuh"

namespace primer::ops::cuda_ops {

template <class T>
constexpr int kVec16 = 16 / int(sizeof(T));  // elements per 16-byte load

template <class T, int N>
struct Pack {
  float v[N];

  __device__ __forceinline__ void load(const T* p) {
    if constexpr (N * sizeof(T) == 16) {
      union {
        uint4 raw;
        T e[N];
      } u;
      u.raw = *reinterpret_cast<const uint4*>(p);
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] = to_float(u.e[k]);
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] = to_float(p[k]);
    }
  }

  __device__ __forceinline__ void store(T* p) const {
    if constexpr (N * sizeof(T) == 16) {
      union {
        uint4 raw;
        T e[N];
      } u;
#pragma unroll
      for (int k = 0; k < N; ++k) u.e[k] = from_float<T>(v[k]);
      *reinterpret_cast<uint4*>(p) = u.raw;
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) p[k] = from_float<T>(v[k]);
    }
  }
};

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// 16-byte packs apply when `length` (a row, or the whole tensor) is a multiple of the pack and every pointer is
// 16-byte aligned; rows of such a length then start aligned too.
template <class T>
bool use_vec16(int64_t length, std::initializer_list<const void*> ptrs) {
  bool ok = length % kVec16<T> == 0;
  for (const void* p : ptrs) ok = ok && aligned16(p);
  return ok;
}

}  // namespace primer::ops::cuda_ops
