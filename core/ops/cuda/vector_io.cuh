// 16-byte vector access for memory-bound kernels: packs of V elements, and loops over one row, shared by the
// threads of a block or a warp, that use vector loads/stores for the aligned body and scalar accesses for the
// unaligned head and the tail.
#pragma once
#include <cstdint>

#include "core/ops/cuda/device_types.cuh"

namespace primer::ops::cuda_ops {

template <class T, int V> struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

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

template <class T> constexpr int kPack = int(16 / sizeof(T));

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
