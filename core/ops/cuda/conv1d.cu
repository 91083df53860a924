#include <algorithm>
#include <type_traits>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/conv1d.h"
#include "core/ops/cuda/vector_pack.cuh"

namespace primer::ops::cuda_ops {
namespace {

// Geometry: threadIdx.x walks packs of N channels (a warp reads 32 consecutive 16-byte packs of one time step),
// threadIdx.y and blockIdx.y walk spans of consecutive time steps, blockIdx.z the batch. Each thread streams its
// span keeping the last K-1 inputs in registers, so every input is read from memory about once.
constexpr int kBlockX = 32, kBlockY = 8;
// Time steps whose loads are issued together (the backward loads two tensors per step).
constexpr int kForwardUnroll = 4, kBackwardUnroll = 2;
// Channels per thread, as bytes of one load. The backward keeps twice the state (windows of x and dz, dw
// accumulators) in registers, so it takes 8-byte packs to stay clear of spills; a warp still reads 256
// contiguous bytes per time step.
constexpr int kForwardPackBytes = 16, kBackwardPackBytes = 8;

template <class T> struct ConvIn {
  const T* x;
  const T* w;
  const T* bias;      // may be null
  const T* state_in;  // may be null (zeros)
  int64_t batch, time, channels;
};

// Position s of the input of batch b extended to the left by the state (s >= -(K-1)), channels c0 .. c0+N-1.
template <class T, int K, int N>
__device__ __forceinline__ void load_input(const ConvIn<T>& in, int64_t b, int64_t s, int64_t c0, float (&out)[N]) {
  if (s >= 0) {
    load_floats<T, N>(in.x + (b * in.time + s) * in.channels + c0, out);
    return;
  }
#pragma unroll
  for (int n = 0; n < N; ++n)
    out[n] = in.state_in ? to_float(in.state_in[(b * in.channels + c0 + n) * (K - 1) + (K - 1 + s)]) : 0.f;
}

template <class T, int K, int N>
__device__ __forceinline__ void load_taps(const ConvIn<T>& in, int64_t c0, float (&w)[K][N], float (&bias)[N]) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int k = 0; k < K; ++k) w[k][n] = to_float(in.w[(c0 + n) * K + k]);
    bias[n] = in.bias ? to_float(in.bias[c0 + n]) : 0.f;
  }
}

// z = bias + sum_k w[k] * input[t - (K-1) + k], with win = inputs t-(K-1) .. t-1 and cur = input t.
template <int K, int N>
__device__ __forceinline__ void preactivation(const float (&w)[K][N], const float (&bias)[N],
                                              const float (&win)[K - 1][N], const float (&cur)[N], float (&z)[N]) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < K - 1; ++k) acc = fmaf(w[k][n], win[k][n], acc);
    z[n] = fmaf(w[K - 1][n], cur[n], acc) + bias[n];
  }
}

template <int M, int N> __device__ __forceinline__ void push(float (&win)[M][N], const float (&v)[N]) {
#pragma unroll
  for (int k = 0; k + 1 < M; ++k)
#pragma unroll
    for (int n = 0; n < N; ++n) win[k][n] = win[k + 1][n];
#pragma unroll
  for (int n = 0; n < N; ++n) win[M - 1][n] = v[n];
}

__device__ __forceinline__ float sigmoid(float z) { return 1.f / (1.f + __expf(-z)); }
__device__ __forceinline__ float dsilu(float z) {
  const float s = sigmoid(z);
  return s * (1.f + z * (1.f - s));
}

template <class T, int K, int N>
__global__ void __launch_bounds__(kBlockX * kBlockY)
    conv1d_forward_kernel(ConvIn<T> in, bool silu, int64_t span, T* __restrict__ y) {
  const int64_t c0 = (int64_t(blockIdx.x) * kBlockX + threadIdx.x) * N;
  const int64_t t0 = (int64_t(blockIdx.y) * kBlockY + threadIdx.y) * span;
  if (c0 >= in.channels || t0 >= in.time) return;
  const int64_t t1 = min(t0 + span, in.time), b = blockIdx.z;
  float w[K][N], bias[N], win[K - 1][N];
  load_taps<T, K, N>(in, c0, w, bias);
#pragma unroll
  for (int k = 0; k < K - 1; ++k) load_input<T, K, N>(in, b, t0 - (K - 1) + k, c0, win[k]);
  for (int64_t t = t0; t < t1; t += kForwardUnroll) {
    float cur[kForwardUnroll][N];
#pragma unroll
    for (int u = 0; u < kForwardUnroll; ++u)
      if (t + u < t1) load_floats<T, N>(in.x + (b * in.time + t + u) * in.channels + c0, cur[u]);
#pragma unroll
    for (int u = 0; u < kForwardUnroll; ++u) {
      if (t + u >= t1) break;
      float z[N];
      preactivation<K, N>(w, bias, win, cur[u], z);
      if (silu)
#pragma unroll
        for (int n = 0; n < N; ++n) z[n] *= sigmoid(z[n]);
      store_floats<T, N>(y + (b * in.time + t + u) * in.channels + c0, z);
      push<K - 1, N>(win, cur[u]);
    }
  }
}

// state_out[b, c, j] = input position T-(K-1)+j: one thread per element.
template <class T, int K> __global__ void conv1d_state_out_kernel(ConvIn<T> in, T* __restrict__ state_out) {
  const int64_t total = in.batch * in.channels * (K - 1);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = i % (K - 1), c = (i / (K - 1)) % in.channels, b = i / ((K - 1) * in.channels);
    float v[1];
    load_input<T, K, 1>(in, b, in.time - (K - 1) + j, c, v);
    state_out[i] = from_float<T>(v[0]);
  }
}

// Backward of one span [t0, t1): streams t over [t0, t1 + K-1) because dx[s] needs dz[s .. s+K-1]. Writes dx of
// the span and one row of parameter-gradient partials (dw[c][0..K-1], dbias[c]) for the second pass.
template <class T, int K, int N>
__global__ void __launch_bounds__(kBlockX * kBlockY)
    conv1d_backward_kernel(ConvIn<T> in, bool silu, int64_t span, const T* __restrict__ dy,
                           const T* __restrict__ dstate_out, T* __restrict__ dx, float* __restrict__ partials) {
  const int64_t c0 = (int64_t(blockIdx.x) * kBlockX + threadIdx.x) * N;
  const int64_t span_index = int64_t(blockIdx.y) * kBlockY + threadIdx.y, t0 = span_index * span;
  if (c0 >= in.channels || t0 >= in.time) return;
  const int64_t steps = in.time, C = in.channels, b = blockIdx.z;
  const int64_t t1 = min(t0 + span, steps), t_stop = min(t1 + K - 1, steps);
  float w[K][N], bias[N], xwin[K - 1][N], dzwin[K - 1][N] = {}, dw[K][N] = {}, db[N] = {};
  load_taps<T, K, N>(in, c0, w, bias);
#pragma unroll
  for (int k = 0; k < K - 1; ++k) load_input<T, K, N>(in, b, t0 - (K - 1) + k, c0, xwin[k]);

  for (int64_t t = t0; t < t1 + K - 1; t += kBackwardUnroll) {
    float xs[kBackwardUnroll][N], gs[kBackwardUnroll][N];
#pragma unroll
    for (int u = 0; u < kBackwardUnroll; ++u)
      if (t + u < t_stop) {
        load_floats<T, N>(in.x + (b * steps + t + u) * C + c0, xs[u]);
        load_floats<T, N>(dy + (b * steps + t + u) * C + c0, gs[u]);
      }
#pragma unroll
    for (int u = 0; u < kBackwardUnroll; ++u) {
      const int64_t tt = t + u;
      if (tt >= t1 + K - 1) break;
      float dz[N];
      if (tt < steps) {
        if (silu) {
          float z[N];
          preactivation<K, N>(w, bias, xwin, xs[u], z);
#pragma unroll
          for (int n = 0; n < N; ++n) dz[n] = gs[u][n] * dsilu(z[n]);
        } else {
#pragma unroll
          for (int n = 0; n < N; ++n) dz[n] = gs[u][n];
        }
        if (tt < t1) {
#pragma unroll
          for (int n = 0; n < N; ++n) {
            db[n] += dz[n];
#pragma unroll
            for (int k = 0; k < K - 1; ++k) dw[k][n] = fmaf(dz[n], xwin[k][n], dw[k][n]);
            dw[K - 1][n] = fmaf(dz[n], xs[u][n], dw[K - 1][n]);
          }
        }
        push<K - 1, N>(xwin, xs[u]);
      } else {
#pragma unroll
        for (int n = 0; n < N; ++n) dz[n] = 0.f;
      }
      // dx[s] for s = tt - (K-1): sum_k w[k] dz[s + K-1 - k] = w[0] dz[tt] + sum_{k>=1} w[k] dzwin[K-1-k].
      const int64_t s = tt - (K - 1);
      if (s >= t0) {
        float g[N];
#pragma unroll
        for (int n = 0; n < N; ++n) {
          float acc = w[0][n] * dz[n];
#pragma unroll
          for (int k = 1; k < K; ++k) acc = fmaf(w[k][n], dzwin[K - 1 - k][n], acc);
          g[n] = acc;
        }
        if (dstate_out && s >= steps - (K - 1))
#pragma unroll
          for (int n = 0; n < N; ++n) g[n] += to_float(dstate_out[(b * C + c0 + n) * (K - 1) + (s - (steps - (K - 1)))]);
        store_floats<T, N>(dx + (b * steps + s) * C + c0, g);
      }
      push<K - 1, N>(dzwin, dz);
    }
  }
  const int64_t spans = (steps + span - 1) / span;
  float* row = partials + (b * spans + span_index) * C * (K + 1);
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int k = 0; k < K; ++k) row[(c0 + n) * (K + 1) + k] = dw[k][n];
    row[(c0 + n) * (K + 1) + K] = db[n];
  }
}

// dstate_in[b, c, j] (input position s = j - (K-1)) = sum over the outputs t = j - k it feeds, plus state_out's
// gradient when T < K-1. One thread per element, recomputing the few dz it needs.
template <class T, int K>
__global__ void conv1d_dstate_in_kernel(ConvIn<T> in, bool silu, const T* __restrict__ dy,
                                        const T* __restrict__ dstate_out, T* __restrict__ dstate_in) {
  const int64_t total = in.batch * in.channels * (K - 1), steps = in.time;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = i % (K - 1), c = (i / (K - 1)) % in.channels, b = i / ((K - 1) * in.channels);
    float w[K][1], bias[1];
    load_taps<T, K, 1>(in, c, w, bias);
    float g = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t t = j - k;
      if (t < 0 || t >= steps) continue;
      float dz = to_float(dy[(b * steps + t) * in.channels + c]);
      if (silu) {
        float win[K - 1][1], cur[1], z[1];
#pragma unroll
        for (int m = 0; m < K - 1; ++m) load_input<T, K, 1>(in, b, t - (K - 1) + m, c, win[m]);
        load_input<T, K, 1>(in, b, t, c, cur);
        preactivation<K, 1>(w, bias, win, cur, z);
        dz *= dsilu(z[0]);
      }
      g = fmaf(w[k][0], dz, g);
    }
    const int64_t s = j - (K - 1);
    if (dstate_out && s >= steps - (K - 1))
      g += to_float(dstate_out[(b * in.channels + c) * (K - 1) + (s - (steps - (K - 1)))]);
    dstate_in[i] = from_float<T>(g);
  }
}

// Second pass: component m of (dw, dbias) sums its partial rows; kBlockY row stripes each sum in order, then the
// stripes are added in a fixed order, so the result is deterministic.
__global__ void __launch_bounds__(kBlockX * kBlockY)
    reduce_partials_kernel(const float* __restrict__ partials, int64_t rows, int64_t channels, int taps,
                           float* __restrict__ dw, float* __restrict__ dbias) {
  __shared__ float stripe[kBlockY][kBlockX];
  const int64_t width = channels * (taps + 1), m = int64_t(blockIdx.x) * kBlockX + threadIdx.x;
  float acc = 0.f;
  if (m < width)
    for (int64_t r = threadIdx.y; r < rows; r += kBlockY) acc += partials[r * width + m];
  stripe[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || m >= width) return;
  float total = 0.f;
#pragma unroll
  for (int y = 0; y < kBlockY; ++y) total += stripe[y][threadIdx.x];
  const int64_t c = m / (taps + 1), k = m % (taps + 1);
  if (k < taps) dw[c * taps + k] += total;
  else if (dbias) dbias[c] += total;
}

// The dtypes this op computes on the GPU (the entry point has validated dtype).
template <class F> void visit_io_type(DType dtype, F&& f) {
  if (dtype == DType::BF16) f(__nv_bfloat16{});
  else f(float{});
}

template <class F> void visit_taps(int taps, F&& f) {
  switch (taps) {
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

// Packs of kBytes when every row starts aligned to them, else one channel per thread.
template <class T, int kBytes, class F>
void visit_pack_width(const Conv1dDims& d, std::initializer_list<const void*> ptrs, F&& f) {
  constexpr int pack = kBytes / int(sizeof(T));
  bool vec = d.channels % pack == 0;
  for (const void* p : ptrs) vec = vec && reinterpret_cast<uintptr_t>(p) % kBytes == 0;
  if (vec) f(std::integral_constant<int, pack>{});
  else f(std::integral_constant<int, 1>{});
}

// Span of time per thread: as long as possible (fewer re-read windows and partial rows) while keeping about
// 2^17 threads in flight.
int64_t pick_span(const Conv1dDims& d, int64_t packs) {
  int64_t span = 256;
  while (span > 16 && d.batch * ((d.time + span - 1) / span) * packs < (int64_t(1) << 17)) span /= 2;
  return span;
}

struct Launch {
  dim3 grid, block;
  int64_t span, spans;
};

Launch launch_for(const Conv1dDims& d, int pack) {
  const int64_t packs = (d.channels + pack - 1) / pack, span = pick_span(d, packs), spans = (d.time + span - 1) / span;
  return {dim3(unsigned((packs + kBlockX - 1) / kBlockX), unsigned((spans + kBlockY - 1) / kBlockY), unsigned(d.batch)),
          dim3(kBlockX, kBlockY), span, spans};
}

template <class T> ConvIn<T> conv_in(const Conv1dDims& d, const void* x, const void* w, const void* bias,
                                     const void* state_in) {
  return {static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
          static_cast<const T*>(state_in), d.batch, d.time, d.channels};
}


}  // namespace

void causal_conv1d(const Conv1dDims& d, DType dtype, const void* x, const void* w, const void* bias, bool silu,
                   const void* state_in, void* y, void* state_out) {
  if (d.batch == 0 || d.channels == 0) return;
  visit_io_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    const ConvIn<T> in = conv_in<T>(d, x, w, bias, state_in);
    visit_taps(d.taps, [&](auto k_tag) {
      constexpr int K = decltype(k_tag)::value;
      if (d.time > 0)
        visit_pack_width<T, kForwardPackBytes>(d, {x, y}, [&](auto n_tag) {
          constexpr int N = decltype(n_tag)::value;
          const Launch l = launch_for(d, N);
          conv1d_forward_kernel<T, K, N><<<l.grid, l.block, 0, cuda::stream()>>>(in, silu, l.span, static_cast<T*>(y));
          PRIMER_CUDA_CHECK_LAUNCH();
        });
      if (state_out) {
        const int64_t n = d.batch * d.channels * (K - 1);
        conv1d_state_out_kernel<T, K><<<grid_for(n, 256), 256, 0, cuda::stream()>>>(in, static_cast<T*>(state_out));
        PRIMER_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

size_t causal_conv1d_backward_workspace_floats(const Conv1dDims& d, DType dtype) {
  // Alignment decides the pack width at launch; size for whichever width has more spans.
  const int64_t spans = std::max(launch_for(d, int(kBackwardPackBytes / dtype_size(dtype))).spans, launch_for(d, 1).spans);
  return size_t(d.batch * spans * d.channels * (d.taps + 1));
}

void causal_conv1d_backward(const Conv1dDims& d, DType dtype, const void* dy, const void* x, const void* w,
                            const void* bias, bool silu, const void* state_in, const void* dstate_out, void* dx,
                            float* dw_accum, float* dbias_accum, void* dstate_in, float* workspace) {
  if (d.batch == 0 || d.channels == 0) return;
  visit_io_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    const ConvIn<T> in = conv_in<T>(d, x, w, bias, state_in);
    visit_taps(d.taps, [&](auto k_tag) {
      constexpr int K = decltype(k_tag)::value;
      if (d.time > 0) {
        visit_pack_width<T, kBackwardPackBytes>(d, {x, dy, dx}, [&](auto n_tag) {
          constexpr int N = decltype(n_tag)::value;
          const Launch l = launch_for(d, N);
          conv1d_backward_kernel<T, K, N><<<l.grid, l.block, 0, cuda::stream()>>>(
              in, silu, l.span, static_cast<const T*>(dy), static_cast<const T*>(dstate_out), static_cast<T*>(dx),
              workspace);
          PRIMER_CUDA_CHECK_LAUNCH();
          const int64_t width = d.channels * (K + 1);
          reduce_partials_kernel<<<unsigned((width + kBlockX - 1) / kBlockX), dim3(kBlockX, kBlockY), 0,
                                   cuda::stream()>>>(workspace, d.batch * l.spans, d.channels, K, dw_accum,
                                                     dbias_accum);
          PRIMER_CUDA_CHECK_LAUNCH();
        });
      }
      if (dstate_in) {
        const int64_t n = d.batch * d.channels * (K - 1);
        conv1d_dstate_in_kernel<T, K><<<grid_for(n, 256), 256, 0, cuda::stream()>>>(
            in, silu, static_cast<const T*>(dy), static_cast<const T*>(dstate_out), static_cast<T*>(dstate_in));
        PRIMER_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

}  // namespace primer::ops::cuda_ops
