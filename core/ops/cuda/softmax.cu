#include <cmath>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/block_reduce.cuh"
#include "core/ops/cuda/device_types.cuh"
#include "core/ops/cuda/softmax.h"
#include "core/ops/cuda/vector_io.cuh"

// One block per row. The forward reads the row twice: once for a running (max, sum of exp(x - max)) that rescales
// the sum whenever the max grows (one pass instead of max-then-sum), once to write exp(x - max) / sum.
namespace primer::ops::cuda_ops {
namespace {

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

template <class T> __global__ void softmax_kernel(T* y, const T* x, int64_t cols) {
  const T* xr = x + blockIdx.x * cols;
  MaxSum acc{-INFINITY, 0.f};
  row_foreach(cols, [&](int64_t, float v) { absorb(acc, v); }, xr);
  acc = block_merge(acc);
  const float inv = 1.f / acc.sum;
  row_map(y + blockIdx.x * cols, cols, [&](float v) { return expf(v - acc.max) * inv; }, xr);
}

template <class T> __global__ void softmax_backward_kernel(T* dx, const T* y, const T* dy, int64_t cols) {
  const int64_t base = blockIdx.x * cols;
  float dot = 0.f;
  row_foreach(cols, [&](int64_t, float yv, float g) { dot += yv * g; }, y + base, dy + base);
  dot = block_sum(dot);
  row_map(dx + base, cols, [&](float yv, float g) { return yv * (g - dot); }, y + base, dy + base);
}

// A warp for short rows (attention scores), more threads as rows grow to vocabulary size.
int threads_for(int64_t cols) { return cols <= 1024 ? 32 : cols <= 8192 ? 256 : 1024; }

}  // namespace

void softmax(void* y, const void* x, DType dtype, int64_t rows, int64_t cols) {
  visit_float(dtype, [&](auto t) {
    using T = decltype(t);
    softmax_kernel<<<unsigned(rows), threads_for(cols), 0, cuda::stream()>>>(static_cast<T*>(y),
                                                                             static_cast<const T*>(x), cols);
    PRIMER_CUDA_CHECK_LAUNCH();
  });
}

void softmax_backward(void* dx, const void* y, const void* dy, DType dtype, int64_t rows, int64_t cols) {
  visit_float(dtype, [&](auto t) {
    using T = decltype(t);
    softmax_backward_kernel<<<unsigned(rows), threads_for(cols), 0, cuda::stream()>>>(
        static_cast<T*>(dx), static_cast<const T*>(y), static_cast<const T*>(dy), cols);
    PRIMER_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace primer::ops::cuda_ops
