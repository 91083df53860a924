#include <cmath>
#include <type_traits>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/block_reduce.cuh"
#include "core/ops/cuda/tile/device_types.cuh"
#include "core/ops/cuda/softmax.h"
#include "core/ops/cuda/tile/vector_io.cuh"

// One warp per row for short rows (attention-sized: several rows per block keep the SMs busy), one block per row
// for long ones (vocabulary-sized). The forward reads the row twice: once for a running (max, sum of exp(x - max))
// that rescales the sum whenever the max grows (one pass instead of max-then-sum), once to write
// exp(x - max) / sum.
namespace primer::ops::cuda_ops {
namespace {

constexpr int64_t kMaxWarpRow = 1024;  // longest row given to a single warp
constexpr int kWarpsPerBlock = 4;

struct MaxSum {
  float max, sum;  // sum of exp(x - max) over the values seen
};

__device__ __forceinline__ void absorb(MaxSum& a, float x) {
  if (x > a.max) {
    a.sum = a.sum * expf(a.max - x) + 1.f;
    a.max = x;
  } else if (x != -INFINITY) {
    a.sum += expf(x - a.max);
  }
}

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = merge(v, {__shfl_xor_sync(0xffffffffu, v.max, offset), __shfl_xor_sync(0xffffffffu, v.sum, offset)});
  return v;
}

__device__ __forceinline__ MaxSum block_merge(MaxSum v) {
  __shared__ MaxSum warp_totals[32];
  v = warp_merge(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? warp_totals[lane] : MaxSum{-INFINITY, 0.f};
  return warp_merge(v);
}

// The row this thread works on and the threads sharing it.
template <bool kWarpRows> __device__ __forceinline__ int64_t row_index() {
  return kWarpRows ? int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5) : int64_t(blockIdx.x);
}
template <bool kWarpRows> __device__ __forceinline__ RowThreads row_threads() {
  return kWarpRows ? RowThreads{int(threadIdx.x & 31), 32} : RowThreads{int(threadIdx.x), int(blockDim.x)};
}

template <bool kWarpRows, class T> __global__ void softmax_kernel(T* y, const T* x, int64_t rows, int64_t cols) {
  cuda::await_prior_grid();
  const int64_t row = row_index<kWarpRows>();
  if (row >= rows) return;  // only whole warps of a warp-per-row block leave; block mode has no spare rows
  const RowThreads t = row_threads<kWarpRows>();
  const T* xr = x + row * cols;
  MaxSum acc{-INFINITY, 0.f};
  row_foreach(
      t, cols, [&](int64_t, float v) { absorb(acc, v); }, xr);
  if constexpr (kWarpRows)
    acc = warp_merge(acc);
  else
    acc = block_merge(acc);
  const float inv = 1.f / acc.sum;
  row_map(
      t, y + row * cols, cols, [&](float v) { return expf(v - acc.max) * inv; }, xr);
}

template <bool kWarpRows, class T>
__global__ void softmax_backward_kernel(T* dx, const T* y, const T* dy, int64_t rows, int64_t cols) {
  cuda::await_prior_grid();
  const int64_t row = row_index<kWarpRows>();
  if (row >= rows) return;
  const RowThreads t = row_threads<kWarpRows>();
  const int64_t base = row * cols;
  float dot = 0.f;
  row_foreach(
      t, cols, [&](int64_t, float yv, float g) { dot += yv * g; }, y + base, dy + base);
  if constexpr (kWarpRows)
    dot = warp_sum(dot);
  else
    dot = block_sum(dot);
  row_map(
      t, dx + base, cols, [&](float yv, float g) { return yv * (g - dot); }, y + base, dy + base);
}

// Launches kernel<kWarpRows> with the row-to-thread mapping chosen by the row length.
template <class Launch> void launch_rows(int64_t rows, int64_t cols, Launch&& launch) {
  if (cols <= kMaxWarpRow) {
    launch(std::true_type{}, unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock), 32 * kWarpsPerBlock);
  } else {
    launch(std::false_type{}, unsigned(rows), cols <= 8192 ? 256 : 1024);
  }
}

}  // namespace

void softmax(void* y, const void* x, DType dtype, int64_t rows, int64_t cols) {
  visit_float(dtype, [&](auto t) {
    using T = decltype(t);
    launch_rows(rows, cols, [&](auto warp_rows, unsigned blocks, int threads) {
      cuda::launch_dependent(softmax_kernel<decltype(warp_rows)::value, T>, blocks, threads, 0, static_cast<T*>(y),
                             static_cast<const T*>(x), rows, cols);
    });
  });
}

void softmax_backward(void* dx, const void* y, const void* dy, DType dtype, int64_t rows, int64_t cols) {
  visit_float(dtype, [&](auto t) {
    using T = decltype(t);
    launch_rows(rows, cols, [&](auto warp_rows, unsigned blocks, int threads) {
      cuda::launch_dependent(softmax_backward_kernel<decltype(warp_rows)::value, T>, blocks, threads, 0,
                             static_cast<T*>(dx), static_cast<const T*>(y), static_cast<const T*>(dy), rows, cols);
    });
  });
}

}  // namespace primer::ops::cuda_ops
