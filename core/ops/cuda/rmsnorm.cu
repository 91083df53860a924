#include <memory>
#include <type_traits>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/tile/async_rows.cuh"
#include "core/ops/cuda/rmsnorm.h"
#include "core/ops/cuda/tile/rowops_vec.cuh"
#include "core/ops/cuda/sm_count.h"
#include "core/ops/cuda/tile/block_reduce.cuh"
#include "core/storage.h"

// Each row is handled by a "row group" of consecutive threads (a multiple of 32, at most 256); short rows share a
// block. A thread owns packs lane, lane + group size, ... (at most P of them) and keeps them in registers between
// the reduction and the output pass, so every byte of x and dy is read from memory once.
namespace primer::ops::cuda_ops {
namespace {

constexpr int kWarp = 32;
constexpr int kMaxRowThreads = 256;  // also the block size the layout aims for
constexpr int kMaxPacksPerThread = kRmsNormMaxPacks / kMaxRowThreads;

struct Layout {
  int packs_per_thread;  // P: 1, 2, 4 or 8
  int row_threads;       // threads per row group
  int rows_per_block;
  int threads() const { return row_threads * rows_per_block; }
};

// The fewest packs per thread that keep a row within kMaxRowThreads threads.
Layout layout_for(int64_t packs) {
  int P = 1;
  while (P < kMaxPacksPerThread && (packs + P - 1) / P > kMaxRowThreads) P *= 2;
  const int row_threads = int(((packs + P - 1) / P + kWarp - 1) / kWarp * kWarp);
  return {P, row_threads, kMaxRowThreads / row_threads};
}

// Sum over each row group of `row_threads` consecutive threads; every thread receives its group's sum. Groups wider
// than a warp meet in `scratch` (one float per warp), so all threads of the block must call this together.
__device__ __forceinline__ float group_sum(float v, int row_threads, float* scratch) {
  v = warp_sum(v);
  if (row_threads == kWarp) return v;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps_per_group = row_threads / kWarp;
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int first = warp / warps_per_group * warps_per_group;
  return warp_sum(lane < warps_per_group ? scratch[first + lane] : 0.f);
}

template <class T, int N, bool kWide, int P> __global__ void __launch_bounds__(kMaxRowThreads)
    rmsnorm_forward_kernel(T* __restrict__ y, float* __restrict__ rstd, const T* __restrict__ x,
                           const T* __restrict__ w, int64_t rows, int D, int row_threads, float eps) {
  __shared__ float scratch[kMaxRowThreads / kWarp];
  const int lane = threadIdx.x % row_threads, packs = D / N;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / row_threads) + threadIdx.x / row_threads;
  const bool active = row < rows;  // idle groups of the last block still take part in group_sum

  Pack<T, N, kWide> xs[P];
  float sum_sq = 0;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int p = lane + j * row_threads;
    if (active && p < packs) {
      xs[j].load(x + row * D + p * N);
#pragma unroll
      for (int k = 0; k < N; ++k) sum_sq += xs[j][k] * xs[j][k];
    }
  }
  const float rs = rsqrtf(group_sum(sum_sq, row_threads, scratch) / float(D) + eps);
  if (!active) return;
  if (rstd && lane == 0) rstd[row] = rs;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int p = lane + j * row_threads;
    if (p < packs) {
      Pack<T, N, kWide> wp, out;
      wp.load(w + p * N);
#pragma unroll
      for (int k = 0; k < N; ++k) out.set(k, wp[k] * (xs[j][k] * rs));
      out.store(y + row * D + p * N);
    }
  }
}

// Rows of x and dy staged ahead of use per thread (AsyncRows): more for short rows, so that a block keeps about
// 32-64 KB in flight. Narrow packs (unaligned data) are read in place.
template <int P> constexpr int kBackwardDepth = P <= 2 ? 4 : 2;
template <class T, int N, bool kWide, int P> using BackwardRows =
    AsyncRows<int(sizeof(T)) * N, 2 * P, kBackwardDepth<P>, kWide>;

// dx = rstd * (g - xhat * mean(g * xhat)) with xhat = x * rstd, g = dy * w. Blocks stride over the rows; each thread
// sums dy * xhat for the columns it owns in registers and finally writes them to its group's row of dw_partial
// ([gridDim.x * groups per block, D]), which sum_partials_kernel reduces in a fixed order. The x and dy of the
// next rows are copied into shared memory while the current row is reduced and written.
template <class T, int N, bool kWide, int P> __global__ void __launch_bounds__(kMaxRowThreads)
    rmsnorm_backward_kernel(T* __restrict__ dx, float* __restrict__ dw_partial, const T* __restrict__ dy,
                            const T* __restrict__ x, const T* __restrict__ w, const float* __restrict__ rstd,
                            int64_t rows, int D, int row_threads) {
  extern __shared__ __align__(16) unsigned char staged[];
  __shared__ float scratch[kMaxRowThreads / kWarp];
  const int lane = threadIdx.x % row_threads, group = threadIdx.x / row_threads;
  const int groups = blockDim.x / row_threads, packs = D / N;
  const int64_t first_row = int64_t(blockIdx.x) * groups, step = int64_t(gridDim.x) * groups;

  // Unit j < P of iteration i is pack j of the thread's x row, unit P + j the same pack of dy (null: none).
  BackwardRows<T, N, kWide, P> staging(staged, threadIdx.x, blockDim.x);
  auto fetch = [&](int64_t i) {
    const int64_t row = first_row + i * step + group;
    const void* src[2 * P];
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const int p = lane + j * row_threads;
      const bool valid = row < rows && p < packs;
      src[j] = valid ? x + row * D + p * N : nullptr;
      src[P + j] = valid ? dy + row * D + p * N : nullptr;
    }
    staging.fetch(i, src);
  };
  for (int i = 0; i < kBackwardDepth<P> - 1; ++i) fetch(i);

  Pack<T, N, kWide> ws[P];
#pragma unroll
  for (int j = 0; j < P; ++j)
    if (lane + j * row_threads < packs) ws[j].load(w + (lane + j * row_threads) * N);
  float dw[P][N] = {};

  // Every thread runs the same number of iterations: group_sum synchronises the block.
  for (int64_t i = 0; first_row + i * step < rows; ++i) {
    const int64_t row = first_row + i * step + group;
    const bool active = row < rows;
    const float rs = active ? rstd[row] : 0.f;
    Pack<T, N, kWide> xs[P], ds[P];
    float dot = 0;
    staging.wait();
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const int p = lane + j * row_threads;
      if (active && p < packs) {
        xs[j].load(static_cast<const T*>(staging.at(i, j, x + row * D + p * N)));
        ds[j].load(static_cast<const T*>(staging.at(i, P + j, dy + row * D + p * N)));
#pragma unroll
        for (int k = 0; k < N; ++k) dot += ds[j][k] * ws[j][k] * xs[j][k];
      }
    }
    fetch(i + kBackwardDepth<P> - 1);
    const float mean_dot = group_sum(dot, row_threads, scratch) * rs / float(D);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const int p = lane + j * row_threads;
      if (active && p < packs) {
        Pack<T, N, kWide> out;
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const float xhat = xs[j][k] * rs;
          out.set(k, rs * (ds[j][k] * ws[j][k] - xhat * mean_dot));
          dw[j][k] += ds[j][k] * xhat;
        }
        out.store(dx + row * D + p * N);
      }
    }
  }

  float* part = dw_partial + (int64_t(blockIdx.x) * groups + group) * D;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int p = lane + j * row_threads;
    if (p < packs)
#pragma unroll
      for (int k = 0; k < N; ++k) part[p * N + k] = dw[j][k];
  }
}

// A block of 32 columns x 32 slices: with about 400 parts (one per resident row group) each thread sums about a
// dozen, with several loads in flight, so this pass takes a few microseconds instead of 6.
constexpr int kSumSlices = 32;

// dw[c] += sum over parts of partial[part][c], in a fixed order: slice y sums parts y, y + kSumSlices, ..., then
// slice totals are added in slice order.
__global__ void sum_partials_kernel(float* __restrict__ dw, const float* __restrict__ partial, int parts, int D) {
  __shared__ float slice_sum[kSumSlices][kWarp + 1];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  float s = 0;
  if (c < D)
#pragma unroll 4
    for (int p = threadIdx.y; p < parts; p += kSumSlices) s += partial[int64_t(p) * D + c];
  slice_sum[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < D) {
    float total = 0;
    for (int i = 0; i < kSumSlices; ++i) total += slice_sum[i][threadIdx.x];
    dw[c] += total;
  }
}

template <class T, int N, bool kWide, int P>
void forward_with(const Layout& l, T* y, float* rstd, const T* x, const T* w, int64_t rows, int D, float eps) {
  const int64_t blocks = (rows + l.rows_per_block - 1) / l.rows_per_block;
  rmsnorm_forward_kernel<T, N, kWide, P>
      <<<unsigned(blocks), l.threads(), 0, cuda::stream()>>>(y, rstd, x, w, rows, D, l.row_threads, eps);
  PRIMER_CUDA_CHECK_LAUNCH();
}

template <class T, int N, bool kWide, int P> void backward_with(const Layout& l, T* dx, float* dw, const T* dy,
                                                                const T* x, const T* w, const float* rstd, int64_t rows,
                                                                int D) {
  auto kernel = rmsnorm_backward_kernel<T, N, kWide, P>;
  const size_t smem = BackwardRows<T, N, kWide, P>::smem_bytes(l.threads());
  PRIMER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  PRIMER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, l.threads(), smem));
  const int64_t needed = (rows + l.rows_per_block - 1) / l.rows_per_block;
  const int64_t resident = int64_t(sm_count()) * (per_sm > 0 ? per_sm : 1);
  const int blocks = int(needed < resident ? needed : resident);
  const int parts = blocks * l.rows_per_block;

  // Scratch from the stream-ordered pool; its free is ordered after the kernels below.
  const std::shared_ptr<Storage> partial =
      allocate(Device::cuda(cuda::current_device()), size_t(parts) * size_t(D) * sizeof(float));
  auto* partial_ptr = static_cast<float*>(partial->data());
  kernel<<<unsigned(blocks), l.threads(), smem, cuda::stream()>>>(dx, partial_ptr, dy, x, w, rstd, rows, D,
                                                                  l.row_threads);
  PRIMER_CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<unsigned((D + kWarp - 1) / kWarp), dim3(kWarp, kSumSlices), 0, cuda::stream()>>>(
      dw, partial_ptr, parts, D);
  PRIMER_CUDA_CHECK_LAUNCH();
}

template <auto V> using Const = std::integral_constant<decltype(V), V>;

// Calls fn(Const<N>, Const<kWide>, Const<P>, layout) for the pack kind and packs per thread that fit a row of D:
// wide 16-byte packs when D is a multiple of one and the data is aligned, narrow packs of the same width when only
// the alignment is missing, single elements otherwise.
template <class T, class F> void with_layout(int64_t D, bool aligned, F&& fn) {
  constexpr int V = kVec16<T>;
  auto by_packs_per_thread = [&](auto n, auto wide) {
    const Layout l = layout_for(D / decltype(n)::value);
    switch (l.packs_per_thread) {
      case 1: return fn(n, wide, Const<1>{}, l);
      case 2: return fn(n, wide, Const<2>{}, l);
      case 4: return fn(n, wide, Const<4>{}, l);
      default: return fn(n, wide, Const<kMaxPacksPerThread>{}, l);
    }
  };
  if (D % V != 0)
    by_packs_per_thread(Const<1>{}, Const<false>{});
  else if (aligned)
    by_packs_per_thread(Const<V>{}, Const<true>{});
  else
    by_packs_per_thread(Const<V>{}, Const<false>{});
}

}  // namespace

void rmsnorm_forward(void* y, float* rstd, const void* x, const void* w, int64_t rows, int64_t D, float eps,
                     DType dtype) {
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_layout<T>(D, aligned16({y, x, w}), [&](auto n, auto wide, auto P, const Layout& l) {
      forward_with<T, decltype(n)::value, decltype(wide)::value, decltype(P)::value>(
          l, static_cast<T*>(y), rstd, static_cast<const T*>(x), static_cast<const T*>(w), rows, int(D), eps);
    });
  });
}

void rmsnorm_backward(void* dx, float* dw_accum, const void* dy, const void* x, const void* w, const float* rstd,
                      int64_t rows, int64_t D, DType dtype) {
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_layout<T>(D, aligned16({dx, dy, x, w}), [&](auto n, auto wide, auto P, const Layout& l) {
      backward_with<T, decltype(n)::value, decltype(wide)::value, decltype(P)::value>(
          l, static_cast<T*>(dx), dw_accum, static_cast<const T*>(dy), static_cast<const T*>(x),
          static_cast<const T*>(w), rstd, rows, int(D));
    });
  });
}

}  // namespace primer::ops::cuda_ops
