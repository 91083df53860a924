// 16-byte vector access for memory-bound kernels: packs of V elements, and loops over one row, shared by the
// threads of a block or a warp, that use vector loads/stores for the aligned body and scalar accesses for the
// unaligned head and the tail.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/ops/cuda/tile/device_types.cuh"

namespace primer::ops::cuda_ops {

// V consecutive elements moved as one aligned unit: a single 16-byte access when V * sizeof(T) == 16.
template <class T, int V> struct alignas(sizeof(T) * V < 16 ? sizeof(T) * V : 16) Pack { T v[V]; };

template <int V, class T> __device__ __forceinline__ Pack<T, V> load_pack(const T* base, int64_t pack_index) {
  return reinterpret_cast<const Pack<T, V>*>(base)[pack_index];
}
template <int V, class T> __device__ __forceinline__ void store_pack(T* base, int64_t pack_index, const Pack<T, V>& p) {
  reinterpret_cast<Pack<T, V>*>(base)[pack_index] = p;
}

template <int V, class T> __host__ __device__ __forceinline__ bool pack_aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * V) == 0;
}

// Elements before p reaches a V-element boundary (at most n).
template <int V, class T> __device__ __forceinline__ int64_t head_length(const T* p, int64_t n) {
  const int64_t h = (V - int64_t(reinterpret_cast<uintptr_t>(p) / sizeof(T)) % V) % V;
  return h < n ? h : n;
}

template <class T> constexpr int kPack = int(16 / sizeof(T));  // elements per 16-byte access

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// N elements at p (aligned to their pack) widened to float.
template <class T, int N> __device__ __forceinline__ void load_floats(const T* p, float (&out)[N]) {
  const Pack<T, N> pk = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_float(pk.v[i]);
}

// Word i of v rounded to T and packed as the bits that land in memory.
template <class T, int N> __device__ __forceinline__ uint32_t packed_word(const float (&v)[N], int i) {
  if constexpr (sizeof(T) == 4) {
    return __float_as_uint(v[i]);
  } else if constexpr (std::is_same_v<T, __half>) {
    const __half2 pair = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
    return reinterpret_cast<const uint32_t&>(pair);
  } else {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    return reinterpret_cast<const uint32_t&>(pair);
  }
}

// Stores v as N elements of T (global memory) with one 4-, 8- or 16-byte access. Written in PTX because the
// compiler splits a plain pack copy of 16-bit elements into 2-byte stores.
template <class T, int N> __device__ __forceinline__ void store_floats(T* p, const float (&v)[N]) {
  constexpr int kBytes = N * int(sizeof(T));
  if constexpr (kBytes % 4 != 0 || kBytes > 16) {
#pragma unroll
    for (int n = 0; n < N; ++n) p[n] = from_float<T>(v[n]);
  } else {
    uint32_t words[kBytes / 4];
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) words[i] = packed_word<T, N>(v, i);
    if constexpr (kBytes == 16)
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(words[0]), "r"(words[1]), "r"(words[2]),
                   "r"(words[3])
                   : "memory");
    else if constexpr (kBytes == 8)
      asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(p), "r"(words[0]), "r"(words[1]) : "memory");
    else
      asm volatile("st.global.b32 [%0], %1;\n" ::"l"(p), "r"(words[0]) : "memory");
  }
}

// v as hi + lo bf16 values (held as floats, stored exactly by store_floats<bf16>): hi rounded to nearest, lo the rest
// (rounded when stored); hi + lo carries ~16 significant bits (the precise operands of the GLA and the Chebyshev
// solve).
template <int N>
__device__ __forceinline__ void split_floats_bf16(const float (&v)[N], float (&hi)[N], float (&lo)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    hi[i] = __bfloat162float(__float2bfloat16_rn(v[i]));
    lo[i] = v[i] - hi[i];
  }
}

// Loads V elements starting at p, `stride` apart: one vector load when stride is 1 (V > 1 needs p pack-aligned).
template <int V, class T> __device__ __forceinline__ Pack<T, V> load_run(const T* p, int64_t stride) {
  if (V > 1 && stride == 1) return load_pack<V>(p, 0);
  Pack<T, V> r;
#pragma unroll
  for (int k = 0; k < V; ++k) r.v[k] = p[k * stride];
  return r;
}

// The threads that share one row: `tid` of `count` (a block's threads, or a warp's lanes).
struct RowThreads {
  int tid, count;
};

// Calls f(i, x[i], xs[i]...) (values as float) for i in [0, n), spread over the row's threads. Vector loads when
// every array has the same alignment phase and element size; otherwise coalesced scalar loads.
template <class F, class T, class... Ts>
__device__ __forceinline__ void row_foreach(RowThreads t, int64_t n, F&& f, const T* x, const Ts*... xs) {
  constexpr int V = kPack<T>;
  const int64_t head = head_length<V>(x, n);
  const bool vector = ((sizeof(Ts) == sizeof(T) && head_length<V>(xs, n) == head) && ... && true);
  const int64_t packs = vector ? (n - head) / V : 0;
  const int64_t tail = vector ? head + packs * V : 0;
  if (vector) {
    for (int64_t i = t.tid; i < head; i += t.count) f(i, to_float(x[i]), to_float(xs[i])...);
#pragma unroll 4
    for (int64_t p = t.tid; p < packs; p += t.count) {
      const Pack<T, V> px = load_pack<V>(x + head, p);
      [&](const auto&... pxs) {
#pragma unroll
        for (int k = 0; k < V; ++k) f(head + p * V + k, to_float(px.v[k]), to_float(pxs.v[k])...);
      }(load_pack<V>(xs + head, p)...);
    }
  }
  for (int64_t i = tail + t.tid; i < n; i += t.count) f(i, to_float(x[i]), to_float(xs[i])...);
}

// y[i] = g(x[i], xs[i]...) for i in [0, n) over the row's threads; x, xs and y of one element type. Vector loads
// and stores when all arrays share an alignment phase.
template <class G, class T, class... Ts>
__device__ __forceinline__ void row_map(RowThreads t, T* y, int64_t n, G&& g, const T* x, const Ts*... xs) {
  constexpr int V = kPack<T>;
  const int64_t head = head_length<V>(x, n);
  const bool vector = head_length<V>(y, n) == head && ((head_length<V>(xs, n) == head) && ... && true);
  const int64_t packs = vector ? (n - head) / V : 0;
  const int64_t tail = vector ? head + packs * V : 0;
  if (vector) {
    for (int64_t i = t.tid; i < head; i += t.count) y[i] = from_float<T>(g(to_float(x[i]), to_float(xs[i])...));
#pragma unroll 4
    for (int64_t p = t.tid; p < packs; p += t.count) {
      const Pack<T, V> px = load_pack<V>(x + head, p);
      Pack<T, V> py;
      [&](const auto&... pxs) {
#pragma unroll
        for (int k = 0; k < V; ++k) py.v[k] = from_float<T>(g(to_float(px.v[k]), to_float(pxs.v[k])...));
      }(load_pack<V>(xs + head, p)...);
      store_pack<V>(y + head, p, py);
    }
  }
  for (int64_t i = tail + t.tid; i < n; i += t.count) y[i] = from_float<T>(g(to_float(x[i]), to_float(xs[i])...));
}

}  // namespace primer::ops::cuda_ops
