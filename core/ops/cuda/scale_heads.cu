#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
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

// N elements of T at p (aligned to their 16-byte packs) as floats, and back: a bf16 x's pack is two f32 ones of out.
template <class T, int N> __device__ __forceinline__ void load_packs(const T* p, float (&v)[N]) {
  constexpr int kPiece = N < kPack<T> ? N : kPack<T>;
#pragma unroll
  for (int i = 0; i < N; i += kPiece) load_floats<T, kPiece>(p + i, reinterpret_cast<float(&)[kPiece]>(v[i]));
}
template <class T, int N> __device__ __forceinline__ void store_packs(T* p, const float (&v)[N]) {
  constexpr int kPiece = N < kPack<T> ? N : kPack<T>;
#pragma unroll
  for (int i = 0; i < N; i += kPiece) store_floats<T, kPiece>(p + i, reinterpret_cast<const float(&)[kPiece]>(v[i]));
}

// hi and lo (nullable; an f32 output's only): the output split into bf16 halves as it is written (split_floats_bf16, as
// cuda_ops::split_bf16 forms them).
template <class TX, class TO, int V> __global__ void __launch_bounds__(kThreads)
    forward_kernel(TO* __restrict__ out, const TX* __restrict__ x, const float* __restrict__ s,
                   const TO* __restrict__ base, __nv_bfloat16* __restrict__ hi, __nv_bfloat16* __restrict__ lo,
                   ScaleHeadsDims d) {
  cuda::await_prior_grid();
  const int64_t packs = d.head_dim / V, index = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= d.rows * d.x_heads * packs) return;
  const int64_t x_row = index / packs, p = index % packs, row = x_row / d.x_heads, j = x_row % d.x_heads;
  float xv[V];
  load_packs<TX, V>(x + x_row * d.head_dim + p * V, xv);
  for (int64_t g = 0; g < d.groups; ++g) {
    const int64_t h = j * d.groups + g, offset = (row * d.x_heads * d.groups + h) * d.head_dim + p * V;
    const float scale = scale_of(s, d, row, h);
    float o[V] = {};
    if (base) load_packs<TO, V>(base + offset, o);
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] += scale * (d.lerp ? xv[i] - o[i] : xv[i]);
    store_packs<TO, V>(out + offset, o);
    if (hi) {
      float h[V], l[V];
      split_floats_bf16<V>(o, h, l);
      store_floats<__nv_bfloat16, V>(hi + offset, h);
      if (lo) store_floats<__nv_bfloat16, V>(lo + offset, l);
    }
  }
}

// dout's pack at `offset`, plus dout_part's when a second path's gradient is given.
template <class TO, int V>
__device__ __forceinline__ void load_dout(const TO* dout, const TO* dout_part, int64_t offset, float (&v)[V]) {
  load_packs<TO, V>(dout + offset, v);
  if (!dout_part) return;
  float w[V];
  load_packs<TO, V>(dout_part + offset, w);
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] += w[i];
}

template <class TX, class TO, int V> __global__ void __launch_bounds__(kThreads)
    backward_kernel(TX* __restrict__ dx, float* __restrict__ ds_rows, TO* __restrict__ dbase,
                    const TO* __restrict__ dout, const TO* __restrict__ dout_part, const TX* __restrict__ x,
                    const float* __restrict__ s, const TO* __restrict__ base, const TX* __restrict__ dx_addend,
                    ScaleHeadsDims d, int group_threads) {
  cuda::await_prior_grid();
  const int64_t packs = d.head_dim / V, H = d.x_heads * d.groups;
  const int64_t thread = int64_t(blockIdx.x) * kThreads + threadIdx.x, x_row = thread / group_threads;
  const int lane = int(thread % group_threads);
  // Rows past the end take part in the shuffles with zeros (every lane of a warp reaches them).
  const bool active = x_row < d.rows * d.x_heads;
  const int64_t row = x_row / d.x_heads, j = x_row % d.x_heads;
  const TX* xr = x + x_row * d.head_dim;
  for (int64_t g = 0; g < d.groups; ++g) {
    const int64_t h = j * d.groups + g, offset = (row * H + h) * d.head_dim;
    const float scale = active ? scale_of(s, d, row, h) : 0.f;
    float dot = 0;
    if (active)
      for (int64_t p = lane; p < packs; p += group_threads) {
        float xv[V], dv[V];
        load_packs<TX, V>(xr + p * V, xv);
        load_dout<TO, V>(dout, dout_part, offset + p * V, dv);
        if (d.lerp) {  // ds against x − base; dbase = (1 − s)·dout in the same pass
          float bv[V], db[V];
          load_packs<TO, V>(base + offset + p * V, bv);
#pragma unroll
          for (int i = 0; i < V; ++i) xv[i] -= bv[i], db[i] = (1.f - scale) * dv[i];
          store_packs<TO, V>(dbase + offset + p * V, db);
        }
#pragma unroll
        for (int i = 0; i < V; ++i) dot += dv[i] * xv[i];
      }
    for (int offset = group_threads / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (active && lane == 0) ds_rows[row * H + h] = dot;
  }
  if (!active) return;
  for (int64_t p = lane; p < packs; p += group_threads) {
    float acc[V] = {};
    if (dx_addend) load_packs<TX, V>(dx_addend + x_row * d.head_dim + p * V, acc);
    for (int64_t g = 0; g < d.groups; ++g) {
      const int64_t h = j * d.groups + g;
      const float scale = scale_of(s, d, row, h);
      float dv[V];
      load_dout<TO, V>(dout, dout_part, (row * H + h) * d.head_dim + p * V, dv);
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] += scale * dv[i];
    }
    store_packs<TX, V>(dx + x_row * d.head_dim + p * V, acc);
  }
}

// Calls f(TX, TO): x's device type and the output's (x's, or f32 from bf16; the op checks the pair).
template <class F> void visit_pair(DType x_dtype, DType out_dtype, F&& f) {
  visit_float(x_dtype, [&](auto x_tag) {
    if (out_dtype == x_dtype)
      f(x_tag, x_tag);
    else
      f(x_tag, float{});
  });
}

// Calls f(V) with x's widest pack (16 bytes, else one element) when it divides the head and every pointer is
// 16-byte aligned (an f32 output's pack is then two of its own).
template <class TX, class F>
void with_pack(const ScaleHeadsDims& d, std::initializer_list<const void*> pointers, F&& f) {
  bool aligned = d.head_dim % kPack<TX> == 0;
  for (const void* p : pointers) aligned = aligned && (p == nullptr || aligned16(p));
  if (aligned)
    f(std::integral_constant<int, kPack<TX>>{});
  else
    f(std::integral_constant<int, 1>{});
}

}  // namespace

void scale_heads_forward(void* out, const void* x, const float* s, const void* base, void* hi, void* lo,
                         const ScaleHeadsDims& d, DType x_dtype, DType out_dtype) {
  if (d.rows * d.x_heads * d.head_dim == 0) return;
  visit_pair(x_dtype, out_dtype, [&](auto x_tag, auto out_tag) {
    using TX = decltype(x_tag);
    using TO = decltype(out_tag);
    with_pack<TX>(d, {out, x, base, hi, lo}, [&](auto pack) {
      constexpr int V = decltype(pack)::value;
      const int64_t threads = d.rows * d.x_heads * (d.head_dim / V);
      cuda::launch_dependent(forward_kernel<TX, TO, V>, unsigned((threads + kThreads - 1) / kThreads), kThreads, 0,
                             static_cast<TO*>(out), static_cast<const TX*>(x), s, static_cast<const TO*>(base),
                             static_cast<__nv_bfloat16*>(hi), static_cast<__nv_bfloat16*>(lo), d);
    });
  });
}

void scale_heads_backward(void* dx, float* ds_rows, void* dbase, const void* dout, const void* dout_part, const void* x,
                          const float* s, const void* base, const void* dx_addend, const ScaleHeadsDims& d,
                          DType x_dtype, DType out_dtype) {
  if (d.rows * d.x_heads == 0) return;
  visit_pair(x_dtype, out_dtype, [&](auto x_tag, auto out_tag) {
    using TX = decltype(x_tag);
    using TO = decltype(out_tag);
    with_pack<TX>(d, {dx, dbase, dout, dout_part, x, base, dx_addend}, [&](auto pack) {
      constexpr int V = decltype(pack)::value;
      const int64_t packs = d.head_dim / V;
      int group_threads = 1;  // the smallest power of two holding a row's packs, at most a warp
      while (group_threads < kWarp && group_threads < packs) group_threads *= 2;
      const int64_t threads = d.rows * d.x_heads * group_threads;
      cuda::launch_dependent(backward_kernel<TX, TO, V>, unsigned((threads + kThreads - 1) / kThreads), kThreads, 0,
                             static_cast<TX*>(dx), ds_rows, static_cast<TO*>(dbase), static_cast<const TO*>(dout),
                             static_cast<const TO*>(dout_part), static_cast<const TX*>(x), s,
                             static_cast<const TO*>(base), static_cast<const TX*>(dx_addend), d, group_threads);
    });
  });
}

}  // namespace primer::ops::cuda_ops
