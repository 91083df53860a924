// Packs of N elements moved in one memory instruction when they span 16 bytes: the vectorised loads and stores of
// the RMSNorm, RoPE and SwiGLU kernels.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "core/ops/cuda/tile/device_types.cuh"

namespace primer::ops::cuda_ops {

template <class T> constexpr int kVec16 = 16 / int(sizeof(T));  // elements per 16-byte load

// N elements of T held in registers in their storage format. kWide packs (16 bytes at 16-byte aligned addresses)
// move with one 128-bit access, narrow ones element by element. Elements read and write as fp32.
template <class T, int N, bool kWide = N * sizeof(T) == 16> struct Pack {
  static_assert(!kWide || N * sizeof(T) == 16, "wide packs are 16 bytes");
  alignas(kWide ? 16 : alignof(T)) T e[N];

  __device__ __forceinline__ void load(const T* p) {
    if constexpr (kWide) {
      *reinterpret_cast<uint4*>(e) = *reinterpret_cast<const uint4*>(p);
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) e[k] = p[k];
    }
  }
  __device__ __forceinline__ void store(T* p) const {
    if constexpr (kWide) {
      *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(e);
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) p[k] = e[k];
    }
  }
  __device__ __forceinline__ float operator[](int k) const { return to_float(e[k]); }
  __device__ __forceinline__ void set(int k, float v) { e[k] = from_float<T>(v); }
};

// True when every pointer is 16-byte aligned (the condition for wide packs, with a length that divides evenly).
inline bool aligned16(std::initializer_list<const void*> ptrs) {
  bool ok = true;
  for (const void* p : ptrs) ok = ok && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  return ok;
}

}  // namespace primer::ops::cuda_ops
