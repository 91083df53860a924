// N consecutive elements moved as one aligned unit (a 16-byte load/store when N * sizeof(T) == 16), widened to
// float for arithmetic. Used by the memory-bound row kernels of embedding and conv1d.
#pragma once
#include <cstdint>

#include "core/ops/cuda/device_types.cuh"

namespace primer::ops::cuda_ops {

template <class T, int N> struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Pack {
  T v[N];
};

// Elements of T per 16-byte load.
template <class T> constexpr int kPack16 = int(16 / sizeof(T));

template <class T, int N> __device__ __forceinline__ void load_floats(const T* p, float (&out)[N]) {
  const Pack<T, N> pk = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_float(pk.v[i]);
}

template <class T, int N> __device__ __forceinline__ void store_floats(T* p, const float (&in)[N]) {
  Pack<T, N> pk;
#pragma unroll
  for (int i = 0; i < N; ++i) pk.v[i] = from_float<T>(in[i]);
  *reinterpret_cast<Pack<T, N>*>(p) = pk;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace primer::ops::cuda_ops
