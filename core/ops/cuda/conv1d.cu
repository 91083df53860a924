#include <algorithm>
#include <type_traits>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/async_rows.cuh"
#include "core/ops/cuda/conv1d.h"
#include "core/ops/cuda/sm_count.h"
#include "core/ops/cuda/tile/vector_io.cuh"

namespace primer::ops::cuda_ops {
namespace {

// Geometry: threadIdx.x walks packs of N channels (a warp reads 32 consecutive packs of one time step),
// threadIdx.y and blockIdx.y walk spans of consecutive time steps, blockIdx.z the batch. Each thread streams its
// span keeping the last K-1 inputs in registers, so every input is read from memory about once; the rows it is
// about to use are prefetched into shared memory (AsyncRows), which keeps enough bytes in flight to run at memory
// speed although the taps, windows and accumulators fill the registers.
constexpr int kBlockX = 32, kBlockY = 8, kThreads = kBlockX * kBlockY;
// Blocks per multiprocessor the kernels are built for (registers <= 128) and the grid is sized to in whole waves.
constexpr int kBlocksPerSm = 2;
// Rows staged per thread: kPrefetchDepth - 1 rows in flight, about 56 KB per multiprocessor.
constexpr int kPrefetchDepth = 8;
// Channels per thread, as bytes of one load. The backward keeps twice the state (windows of x and dz, dw
// accumulators) in registers, so it takes 8-byte packs to stay clear of spills.
constexpr int kForwardPackBytes = 16, kBackwardPackBytes = 8;
// Shortest span per thread: its K-1 halo rows are read twice.
constexpr int64_t kMinSpan = 16;

// Word i of the packed T values v: a float's bits, or a pair of bf16 rounded by one instruction.
template <class T> struct ConvIn {
  const T* x;
  const T* w;
  const T* bias;      // may be null
  const T* state_in;  // may be null (zeros)
  int64_t batch, time, channels;
};

// Input position s < 0 of batch b (the state extends the input to the left), channels c0 .. c0+N-1.
template <class T, int K, int N>
__device__ __forceinline__ void load_state(const ConvIn<T>& in, int64_t b, int64_t s, int64_t c0, float (&out)[N]) {
#pragma unroll
  for (int n = 0; n < N; ++n)
    out[n] = in.state_in ? to_float(in.state_in[(b * in.channels + c0 + n) * (K - 1) + (K - 1 + s)]) : 0.f;
}

// Input position s >= -(K-1) of batch b, channels c0 .. c0+N-1, read directly (the single-element kernels).
template <class T, int K, int N>
__device__ __forceinline__ void load_input(const ConvIn<T>& in, int64_t b, int64_t s, int64_t c0, float (&out)[N]) {
  if (s >= 0)
    load_floats<T, N>(in.x + (b * in.time + s) * in.channels + c0, out);
  else
    load_state<T, K, N>(in, b, s, c0, out);
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
template <int K, int N> __device__ __forceinline__ void preactivation(const float (&w)[K][N], const float (&bias)[N],
                                                                      const float (&win)[K - 1][N],
                                                                      const float (&cur)[N], float (&z)[N]) {
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

// __fdividef: an IEEE division costs a dozen instructions per element, and these kernels are short of issue slots.
// (It returns 0 for denominators past 2^126, where the sigmoid is 0 to fp32 precision anyway.)
__device__ __forceinline__ float sigmoid(float z) { return __fdividef(1.f, 1.f + __expf(-z)); }
__device__ __forceinline__ float dsilu(float z) {
  const float s = sigmoid(z);
  return s * (1.f + z * (1.f - s));
}

// Packs of several channels are staged through shared memory; single channels (unaligned or odd C) are read in
// place, since cp.async copies at least 4 aligned bytes.
template <class T, int N, int kSources> using ConvRows =
    AsyncRows<int(sizeof(T)) * N, kSources, kPrefetchDepth, (N > 1)>;

// Each head's L2 norm in the forward's pass (kNorm): a head's channels are `lanes` consecutive threads of a warp
// (head_dim / N, a power of two up to 32, heads aligned to them), which walk the same time steps, so a token's sum of
// squares over the head is a butterfly of shuffles among them.
struct HeadNormArgs {
  float* rstd;  // [B, T, C / head_dim]
  int head_dim, lanes;
  float eps;
};

template <class T, int K, int N, bool kSilu, bool kNorm> __global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    conv1d_forward_kernel(ConvIn<T> in, int64_t span, T* __restrict__ y, HeadNormArgs norm) {
  cuda::await_prior_grid();
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t c0 = (int64_t(blockIdx.x) * kBlockX + threadIdx.x) * N;
  const int64_t t0 = (int64_t(blockIdx.y) * kBlockY + threadIdx.y) * span;
  if (c0 >= in.channels || t0 >= in.time) return;
  // This thread's head's lanes: whole heads return together above, so they all reach every shuffle.
  [[maybe_unused]] const unsigned head_lanes =
      kNorm && norm.lanes < 32 ? ((1u << norm.lanes) - 1u) << (threadIdx.x & ~unsigned(norm.lanes - 1)) : ~0u;
  const int64_t t1 = min(t0 + span, in.time), b = blockIdx.z, C = in.channels, first = t0 - (K - 1);
  const T* x_row = in.x + (b * in.time + t0) * C + c0;  // x of the row being used (from t0 on)
  T* y_row = y + (b * in.time + t0) * C + c0;
  ConvRows<T, N, 1> rows(smem, int(threadIdx.y * kBlockX + threadIdx.x), kThreads);
  // Pointers advance by C per row: 64-bit products per row would cost issue slots this kernel lacks.
  int64_t ahead = first;
  const T* ahead_row = x_row - (K - 1) * C;
  auto fetch_next = [&] {
    rows.fetch(ahead, {ahead >= 0 && ahead < t1 ? ahead_row : nullptr});
    ++ahead;
    ahead_row += C;
  };
  // Prefetch before reading the taps, so that their loads overlap the first rows'.
#pragma unroll
  for (int i = 0; i < kPrefetchDepth - 1; ++i) fetch_next();
  float w[K][N], bias[N], win[K - 1][N];
  load_taps<T, K, N>(in, c0, w, bias);
#pragma unroll
  for (int k = 0; k < K - 1; ++k) {  // inputs t0-(K-1) .. t0-1: x, or the state before the sequence
    const int64_t r = first + k;
    rows.wait();
    if (r >= 0)
      load_floats<T, N>(static_cast<const T*>(rows.at(r, 0, x_row + (r - t0) * C)), win[k]);
    else
      load_state<T, K, N>(in, b, r, c0, win[k]);
    fetch_next();
  }
#pragma unroll 2
  for (int64_t t = t0; t < t1; ++t, x_row += C, y_row += C) {
    float cur[N], z[N];
    rows.wait();
    load_floats<T, N>(static_cast<const T*>(rows.at(t, 0, x_row)), cur);
    fetch_next();
    preactivation<K, N>(w, bias, win, cur, z);
    if constexpr (kSilu)
#pragma unroll
      for (int n = 0; n < N; ++n) z[n] *= sigmoid(z[n]);
    if constexpr (kNorm) {  // as ops::rmsnorm's l2 would, reading the conv's output rounded to T
      float sum_sq = 0.f;
#pragma unroll
      for (int n = 0; n < N; ++n) {
        z[n] = to_float(from_float<T>(z[n]));
        sum_sq += z[n] * z[n];
      }
      for (int offset = 1; offset < norm.lanes; offset <<= 1) sum_sq += __shfl_xor_sync(head_lanes, sum_sq, offset);
      const float r = rsqrtf(sum_sq + norm.eps);
#pragma unroll
      for (int n = 0; n < N; ++n) z[n] *= r;
      const int64_t heads = in.channels / norm.head_dim;
      if ((threadIdx.x & unsigned(norm.lanes - 1)) == 0) norm.rstd[(b * in.time + t) * heads + c0 / norm.head_dim] = r;
    }
    store_floats<T, N>(y_row, z);
    push<K - 1, N>(win, cur);
  }
}

// state_out[b, c, j] = input position T-(K-1)+j: one thread per element.
template <class T, int K> __global__ void conv1d_state_out_kernel(ConvIn<T> in, T* __restrict__ state_out) {
  cuda::await_prior_grid();
  const int64_t total = in.batch * in.channels * (K - 1);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = i % (K - 1), c = (i / (K - 1)) % in.channels, b = i / ((K - 1) * in.channels);
    float v[1];
    load_input<T, K, 1>(in, b, in.time - (K - 1) + j, c, v);
    state_out[i] = from_float<T>(v[0]);
  }
}

// Shared memory of the backward: the prefetch slots during the stream, then the block's parameter-gradient sums.
template <class T, int K, int N> constexpr size_t backward_smem_bytes() {
  return std::max(ConvRows<T, N, 2>::smem_bytes(kThreads), size_t(K + 1) * kThreads * N * sizeof(float));
}

// Backward of one span [t0, t1): streams t over [t0, t1 + K-1) because dx[s] needs dz[s .. s+K-1], with x from
// t0 - (K-1) on (the pre-activation needs K-1 earlier inputs) and dy from t0 on. Writes dx of the span; the
// block then sums its threads' parameter gradients over threadIdx.y in a fixed order and writes one row of
// partials (dw[c][0..K-1], dbias[c]) for reduce_partials_kernel.
template <class T, int K, int N, bool kSilu> __global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    conv1d_backward_kernel(ConvIn<T> in, int64_t span, const T* __restrict__ dy, const T* __restrict__ dstate_out,
                           T* __restrict__ dx, float* __restrict__ partials) {
  cuda::await_prior_grid();
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t c0 = (int64_t(blockIdx.x) * kBlockX + threadIdx.x) * N;
  const int64_t t0 = (int64_t(blockIdx.y) * kBlockY + threadIdx.y) * span;
  const int64_t steps = in.time, C = in.channels, b = blockIdx.z;
  float dw[K][N] = {}, db[N] = {};
  if (c0 < C && t0 < steps) {  // idle threads still take part in the block's sums below
    const int64_t t1 = min(t0 + span, steps), t_stop = min(t1 + K - 1, steps), first = t0 - (K - 1);
    ConvRows<T, N, 2> rows(smem, int(threadIdx.y * kBlockX + threadIdx.x), kThreads);
    // Row pointers advance by C per row (64-bit products per row would cost issue slots). x rows are fetched from
    // first on, dy rows from t0 on, both up to t_stop.
    const int64_t column = b * steps * C + c0;
    int64_t ahead = first;
    const T* ahead_x = in.x + column + first * C;
    const T* ahead_dy = dy + column + first * C;
    auto fetch_next = [&] {
      const bool valid = ahead >= 0 && ahead < t_stop;
      rows.fetch(ahead, {valid ? ahead_x : nullptr, valid && ahead >= t0 ? ahead_dy : nullptr});
      ++ahead;
      ahead_x += C;
      ahead_dy += C;
    };
#pragma unroll
    for (int i = 0; i < kPrefetchDepth - 1; ++i) fetch_next();
    float w[K][N], bias[N], xwin[K - 1][N], dzwin[K - 1][N] = {};
    load_taps<T, K, N>(in, c0, w, bias);
#pragma unroll
    for (int k = 0; k < K - 1; ++k) {  // inputs t0-(K-1) .. t0-1: x, or the state before the sequence
      const int64_t r = first + k;
      rows.wait();
      if (r >= 0)
        load_floats<T, N>(static_cast<const T*>(rows.at(r, 0, in.x + column + r * C)), xwin[k]);
      else
        load_state<T, K, N>(in, b, r, c0, xwin[k]);
      fetch_next();
    }

    // Step t: dz[t] (zero past the sequence); dw, dbias when t is in the span; then dx[s], s = t - (K-1), which
    // is sum_k w[k] dz[s + K-1 - k] = w[0] dz[t] + sum_{k>=1} w[k] dzwin[K-1-k]. kEdge steps (the first and the
    // last K-1) check the bounds; the steps between need no checks.
    auto step = [&](int64_t t, auto edge_tag) {
      constexpr bool kEdge = decltype(edge_tag)::value;
      float dz[N];
      rows.wait();
      if (!kEdge || t < steps) {
        float xs[N], gs[N];
        load_floats<T, N>(static_cast<const T*>(rows.at(t, 0, in.x + column + t * C)), xs);
        load_floats<T, N>(static_cast<const T*>(rows.at(t, 1, dy + column + t * C)), gs);
        if constexpr (kSilu) {
          float z[N];
          preactivation<K, N>(w, bias, xwin, xs, z);
#pragma unroll
          for (int n = 0; n < N; ++n) dz[n] = gs[n] * dsilu(z[n]);
        } else {
#pragma unroll
          for (int n = 0; n < N; ++n) dz[n] = gs[n];
        }
        if (!kEdge || t < t1) {
#pragma unroll
          for (int n = 0; n < N; ++n) {
            db[n] += dz[n];
#pragma unroll
            for (int k = 0; k < K - 1; ++k) dw[k][n] = fmaf(dz[n], xwin[k][n], dw[k][n]);
            dw[K - 1][n] = fmaf(dz[n], xs[n], dw[K - 1][n]);
          }
        }
        push<K - 1, N>(xwin, xs);
      } else {
#pragma unroll
        for (int n = 0; n < N; ++n) dz[n] = 0.f;
      }
      fetch_next();
      const int64_t s = t - (K - 1);
      if (!kEdge || s >= t0) {
        float g[N];
#pragma unroll
        for (int n = 0; n < N; ++n) {
          float acc = w[0][n] * dz[n];
#pragma unroll
          for (int k = 1; k < K; ++k) acc = fmaf(w[k][n], dzwin[K - 1 - k][n], acc);
          g[n] = acc;
        }
        if (kEdge && dstate_out && s >= steps - (K - 1))
#pragma unroll
          for (int n = 0; n < N; ++n)
            g[n] += to_float(dstate_out[(b * C + c0 + n) * (K - 1) + (s - (steps - (K - 1)))]);
        store_floats<T, N>(dx + column + s * C, g);
      }
      push<K - 1, N>(dzwin, dz);
    };
    // Interior steps [t0 + K-1, t1): every row exists, is in the span and has its dx in the span.
    const int64_t interior_begin = min(t0 + K - 1, t1);
    for (int64_t t = t0; t < interior_begin; ++t) step(t, std::true_type{});
#pragma unroll 2
    for (int64_t t = interior_begin; t < t1; ++t) step(t, std::false_type{});
    for (int64_t t = t1; t < t1 + K - 1; ++t) step(t, std::true_type{});
  }

  // sums[m][y][x * N + n]: component m (dw taps, then dbias) of thread (x, y)'s channel n.
  constexpr int kWidth = kBlockX * N;
  __syncthreads();  // every thread is done with its prefetch slots
  float* sums = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int k = 0; k < K; ++k) sums[(k * kBlockY + threadIdx.y) * kWidth + threadIdx.x * N + n] = dw[k][n];
    sums[(K * kBlockY + threadIdx.y) * kWidth + threadIdx.x * N + n] = db[n];
  }
  __syncthreads();
  const int64_t block_c0 = int64_t(blockIdx.x) * kWidth;
  float* row = partials + (b * gridDim.y + blockIdx.y) * C * (K + 1);
  for (int i = threadIdx.y * kBlockX + threadIdx.x; i < (K + 1) * kWidth; i += kThreads) {
    const int j = i / (K + 1), m = i % (K + 1);
    if (block_c0 + j >= C) break;
    float total = 0.f;
#pragma unroll
    for (int y = 0; y < kBlockY; ++y) total += sums[(m * kBlockY + y) * kWidth + j];
    row[block_c0 * (K + 1) + i] = total;
  }
}

// dstate_in[b, c, j] (input position s = j - (K-1)) = sum over the outputs t = j - k it feeds, plus state_out's
// gradient when T < K-1. One thread per element, recomputing the few dz it needs.
template <class T, int K> __global__ void conv1d_dstate_in_kernel(ConvIn<T> in, bool silu, const T* __restrict__ dy,
                                                                  const T* __restrict__ dstate_out,
                                                                  T* __restrict__ dstate_in) {
  cuda::await_prior_grid();
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
__global__ void __launch_bounds__(kBlockX* kBlockY)
    reduce_partials_kernel(const float* __restrict__ partials, int64_t rows, int64_t channels, int taps,
                           float* __restrict__ dw, float* __restrict__ dbias) {
  cuda::await_prior_grid();
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
  if (k < taps)
    dw[c * taps + k] += total;
  else if (dbias)
    dbias[c] += total;
}

// The dtypes this op computes on the GPU (the entry point has validated dtype).
template <class F> void visit_io_type(DType dtype, F&& f) {
  if (dtype == DType::BF16)
    f(__nv_bfloat16{});
  else
    f(float{});
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

template <class F> void visit_silu(bool silu, F&& f) {
  if (silu)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// Packs of kBytes when every row starts aligned to them, else one channel per thread.
template <class T, int kBytes, class F>
void visit_pack_width(const Conv1dDims& d, std::initializer_list<const void*> ptrs, F&& f) {
  constexpr int pack = kBytes / int(sizeof(T));
  bool vec = d.channels % pack == 0;
  for (const void* p : ptrs) vec = vec && reinterpret_cast<uintptr_t>(p) % kBytes == 0;
  if (vec)
    f(std::integral_constant<int, pack>{});
  else
    f(std::integral_constant<int, 1>{});
}

// Blocks along time and the span per thread: the grid should fill whole waves of resident blocks (a partial last
// wave leaves multiprocessors idle) while spans stay long (each re-reads K-1 halo rows). Tries grids of 1 to 4
// waves and keeps the best product of wave fill and useful fraction of rows read.
struct Launch {
  dim3 grid, block;
  int64_t span;
};

Launch launch_for(const Conv1dDims& d, int pack) {
  const int64_t packs = (d.channels + pack - 1) / pack, column_blocks = (packs + kBlockX - 1) / kBlockX;
  const int64_t resident = int64_t(sm_count()) * kBlocksPerSm, per_tile = d.batch * column_blocks;
  const int64_t one_tile_span = std::max<int64_t>(1, (d.time + kBlockY - 1) / kBlockY);
  const int64_t shortest = std::min(kMinSpan, one_tile_span);
  int64_t best_span = one_tile_span;
  double best_score = -1;
  for (int64_t waves = 1; waves <= 4; ++waves) {
    const int64_t tiles_wanted = std::max<int64_t>(1, waves * resident / per_tile);
    const int64_t span = std::max(shortest, (d.time + tiles_wanted * kBlockY - 1) / (tiles_wanted * kBlockY));
    const int64_t blocks = per_tile * ((d.time + span * kBlockY - 1) / (span * kBlockY));
    const double fill = double(blocks) / double((blocks + resident - 1) / resident * resident);
    const double score = fill * double(span) / double(span + d.taps - 1);
    if (score > best_score) best_score = score, best_span = span;
  }
  const int64_t tiles = (d.time + best_span * kBlockY - 1) / (best_span * kBlockY);
  return {dim3(unsigned(column_blocks), unsigned(tiles), unsigned(d.batch)), dim3(kBlockX, kBlockY), best_span};
}

// Kernels staging more than the default 48 KB of shared memory per block must say so first.
template <class Kernel> void allow_dynamic_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    PRIMER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

template <class T>
ConvIn<T> conv_in(const Conv1dDims& d, const void* x, const void* w, const void* bias, const void* state_in) {
  return {static_cast<const T*>(x),
          static_cast<const T*>(w),
          static_cast<const T*>(bias),
          static_cast<const T*>(state_in),
          d.batch,
          d.time,
          d.channels};
}

}  // namespace

bool causal_conv1d_fuses_head_norm(const Conv1dDims& d, DType dtype, const void* x, const void* y, int head_dim) {
  const int pack = kForwardPackBytes / int(dtype_size(dtype)), lanes = head_dim / pack;
  bool packed = d.channels % pack == 0;
  for (const void* p : {x, y}) packed = packed && reinterpret_cast<uintptr_t>(p) % kForwardPackBytes == 0;
  return packed && head_dim > 0 && head_dim % pack == 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0 &&
         d.channels % head_dim == 0;
}

void causal_conv1d(const Conv1dDims& d, DType dtype, const void* x, const void* w, const void* bias, bool silu,
                   const void* state_in, void* y, void* state_out, const ConvHeadNorm& head_norm) {
  if (d.batch == 0 || d.channels == 0) return;
  const bool norm = head_norm.head_dim > 0;
  PRIMER_CHECK(!norm || (silu && causal_conv1d_fuses_head_norm(d, dtype, x, y, head_norm.head_dim)),
               "cuda_ops::causal_conv1d: a head norm in the conv's pass needs SiLU and "
               "causal_conv1d_fuses_head_norm (head_dim {}, {} channels)",
               head_norm.head_dim, d.channels);
  visit_io_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    const ConvIn<T> in = conv_in<T>(d, x, w, bias, state_in);
    visit_taps(d.taps, [&](auto k_tag) {
      constexpr int K = decltype(k_tag)::value;
      if (d.time > 0)
        visit_pack_width<T, kForwardPackBytes>(d, {x, y}, [&](auto n_tag) {
          constexpr int N = decltype(n_tag)::value;
          const Launch l = launch_for(d, N);
          const size_t smem = ConvRows<T, N, 1>::smem_bytes(kThreads);
          auto launch = [&](auto kernel, const HeadNormArgs& args) {
            allow_dynamic_smem(kernel, smem);
            cuda::launch_dependent(kernel, l.grid, l.block, smem, in, l.span, static_cast<T*>(y), args);
          };
          if constexpr (N > 1) {  // (the check above: packed when normed)
            if (norm) {
              launch(conv1d_forward_kernel<T, K, N, true, true>,
                     {head_norm.rstd, head_norm.head_dim, head_norm.head_dim / N, head_norm.eps});
              return;
            }
          }
          visit_silu(silu, [&](auto silu_tag) {
            launch(conv1d_forward_kernel<T, K, N, decltype(silu_tag)::value, false>, HeadNormArgs{});
          });
        });
      if (state_out) {
        const int64_t n = d.batch * d.channels * (K - 1);
        cuda::launch_dependent(conv1d_state_out_kernel<T, K>, grid_for(n, 256), 256, 0, in, static_cast<T*>(state_out));
      }
    });
  });
}

size_t causal_conv1d_backward_workspace_floats(const Conv1dDims& d, DType dtype) {
  // Alignment decides the pack width at launch; size for whichever width has more blocks along time.
  const unsigned tiles =
      std::max(launch_for(d, int(kBackwardPackBytes / dtype_size(dtype))).grid.y, launch_for(d, 1).grid.y);
  return size_t(d.batch) * tiles * size_t(d.channels) * size_t(d.taps + 1);
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
          visit_silu(silu, [&](auto silu_tag) {
            auto kernel = conv1d_backward_kernel<T, K, N, decltype(silu_tag)::value>;
            const size_t smem = backward_smem_bytes<T, K, N>();
            allow_dynamic_smem(kernel, smem);
            cuda::launch_dependent(kernel, l.grid, l.block, smem, in, l.span, static_cast<const T*>(dy),
                                   static_cast<const T*>(dstate_out), static_cast<T*>(dx), workspace);
          });
          const int64_t width = d.channels * (K + 1);
          cuda::launch_dependent(reduce_partials_kernel, unsigned((width + kBlockX - 1) / kBlockX),
                                 dim3(kBlockX, kBlockY), 0, workspace, d.batch * l.grid.y, d.channels, K, dw_accum,
                                 dbias_accum);
        });
      }
      if (dstate_in) {
        const int64_t n = d.batch * d.channels * (K - 1);
        cuda::launch_dependent(conv1d_dstate_in_kernel<T, K>, grid_for(n, 256), 256, 0, in, silu,
                               static_cast<const T*>(dy), static_cast<const T*>(dstate_out),
                               static_cast<T*>(dstate_in));
      }
    });
  });
}

}  // namespace primer::ops::cuda_ops
