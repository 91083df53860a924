#include "core/cuda_runtime.h"
#include "core/ops/cuda/scale_heads.h"
#include "core/ops/cuda/tile/device_types.cuh"
#include "core/ops/cuda/tile/vector_io.cuh"

// Forward: one thread per pack of an x head row, writing that pack into each of its group's output heads (x read
// once). Backward: a power-of-two group of at most a warp's threads per x head row, lanes striding its packs; per
// output head the dot with x is reduced by shuffles within the group (fixed order), then the group's scaled sum
// gives dx (dout's row re-read from L1: a group's rows are G·D elements).
namespace primer::ops::cuda_ops {
namespace {

constexpr int kThreads = 256, kWarp = 32;

__device__ __forceinline__ float scale_of(const float* s, const ScaleHeadsDims& d, int64_t row, int64_t h) {
  return s[d.per_row ? row * d.x_heads * d.groups + h : h];
}

template <class T, int V> __global__ void __launch_bounds__(kThreads)
    forward_kernel(T* __restrict__ out, const T* __restrict__ x, const float* __restrict__ s,
                   const T* __restrict__ base, ScaleHeadsDims d) {
  const int64_t packs = d.head_dim / V, index = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= d.rows * d.x_heads * packs) return;
  const int64_t x_row = index / packs, p = index % packs, row = x_row / d.x_heads, j = x_row % d.x_heads;
  float xv[V];
  load_floats<T, V>(x + x_row * d.head_dim + p * V, xv);
  for (int64_t g = 0; g < d.groups; ++g) {
    const int64_t h = j * d.groups + g, offset = (row * d.x_heads * d.groups + h) * d.head_dim + p * V;
    const float scale = scale_of(s, d, row, h);
    float o[V] = {};
    if (base) load_floats<T, V>(base + offset, o);
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] += scale * xv[i];
    store_floats<T, V>(out + offset, o);
  }
}

template <class T, int V> __global__ void __launch_bounds__(kThreads)
    backward_kernel(T* __restrict__ dx, float* __restrict__ ds_rows, const T* __restrict__ dout,
                    const T* __restrict__ x, const float* __restrict__ s, const T* __restrict__ dx_addend,
                    ScaleHeadsDims d, int group_threads) {
  const int64_t packs = d.head_dim / V, H = d.x_heads * d.groups;
  const int64_t thread = int64_t(blockIdx.x) * kThreads + threadIdx.x, x_row = thread / group_threads;
  const int lane = int(thread % group_threads);
  // Rows past the end take part in the shuffles with zeros (every lane of a warp reaches them).
  const bool active = x_row < d.rows * d.x_heads;
  const int64_t row = x_row / d.x_heads, j = x_row % d.x_heads;
  const T* xr = x + x_row * d.head_dim;
  for (int64_t g = 0; g < d.groups; ++g) {
    const int64_t h = j * d.groups + g;
    const T* dr = dout + (row * H + h) * d.head_dim;
    float dot = 0;
    if (active)
      for (int64_t p = lane; p < packs; p += group_threads) {
        float xv[V], dv[V];
        load_floats<T, V>(xr + p * V, xv);
        load_floats<T, V>(dr + p * V, dv);
#pragma unroll
        for (int i = 0; i < V; ++i) dot += dv[i] * xv[i];
      }
    for (int offset = group_threads / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (active && lane == 0) ds_rows[row * H + h] = dot;
  }
  if (!active) return;
  for (int64_t p = lane; p < packs; p += group_threads) {
    float acc[V] = {};
    if (dx_addend) load_floats<T, V>(dx_addend + x_row * d.head_dim + p * V, acc);
    for (int64_t g = 0; g < d.groups; ++g) {
      const int64_t h = j * d.groups + g;
      const float scale = scale_of(s, d, row, h);
      float dv[V];
      load_floats<T, V>(dout + (row * H + h) * d.head_dim + p * V, dv);
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] += scale * dv[i];
    }
    store_floats<T, V>(dx + x_row * d.head_dim + p * V, acc);
  }
}

// Calls f(V) with the widest pack (16 bytes, else one element) that divides the head and every row's start.
template <class T, class F>
void with_pack(const ScaleHeadsDims& d, std::initializer_list<const void*> pointers, F&& f) {
  bool aligned = d.head_dim % kPack<T> == 0;
  for (const void* p : pointers) aligned = aligned && (p == nullptr || aligned16(p));
  if (aligned)
    f(std::integral_constant<int, kPack<T>>{});
  else
    f(std::integral_constant<int, 1>{});
}

}  // namespace

void scale_heads_forward(void* out, const void* x, const float* s, const void* base, const ScaleHeadsDims& d,
                         DType dtype) {
  if (d.rows * d.x_heads * d.head_dim == 0) return;
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_pack<T>(d, {out, x, base}, [&](auto pack) {
      constexpr int V = decltype(pack)::value;
      const int64_t threads = d.rows * d.x_heads * (d.head_dim / V);
      forward_kernel<T, V><<<unsigned((threads + kThreads - 1) / kThreads), kThreads, 0, cuda::stream()>>>(
          static_cast<T*>(out), static_cast<const T*>(x), s, static_cast<const T*>(base), d);
      PRIMER_CUDA_CHECK_LAUNCH();
    });
  });
}

void scale_heads_backward(void* dx, float* ds_rows, const void* dout, const void* x, const float* s,
                          const void* dx_addend, const ScaleHeadsDims& d, DType dtype) {
  if (d.rows * d.x_heads == 0) return;
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_pack<T>(d, {dx, dout, x, dx_addend}, [&](auto pack) {
      constexpr int V = decltype(pack)::value;
      const int64_t packs = d.head_dim / V;
      int group_threads = 1;  // the smallest power of two holding a row's packs, at most a warp
      while (group_threads < kWarp && group_threads < packs) group_threads *= 2;
      const int64_t threads = d.rows * d.x_heads * group_threads;
      backward_kernel<T, V><<<unsigned((threads + kThreads - 1) / kThreads), kThreads, 0, cuda::stream()>>>(
          static_cast<T*>(dx), ds_rows, static_cast<const T*>(dout), static_cast<const T*>(x), s,
          static_cast<const T*>(dx_addend), d, group_threads);
      PRIMER_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace primer::ops::cuda_ops
