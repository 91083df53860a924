#include <memory>
#include <type_traits>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/rmsnorm.h"
#include "core/ops/cuda/rowops_vec.cuh"
#include "core/storage.h"

// Rows are handled by a "row group": one warp (short rows, several rows per block) or the whole block (long rows).
// Each thread of a group owns the packs lane, lane + group size, ... of its row and re-reads them from L1 in the
// second pass rather than holding them in registers.
namespace primer::ops::cuda_ops {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpRowsPerBlock = 8;  // warp mode: 8 rows per 256-thread block
constexpr int kMaxPacksPerLane = 4;   // rows of up to 32 * 4 packs use a warp, longer ones a block

struct Launch {
  bool block_per_row;
  int threads;  // block size
  int rows_per_block;
};

Launch launch_for(int64_t packs) {
  if (packs <= int64_t(kWarp) * kMaxPacksPerLane) return {false, kWarp * kWarpRowsPerBlock, kWarpRowsPerBlock};
  // About two packs per thread: enough loads in flight without idle threads on short rows.
  const int64_t want = (packs / 2 + kWarp - 1) / kWarp * kWarp;
  return {true, int(want < 1024 ? want : 1024), 1};
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;  // identical in every lane: each butterfly step adds the same two values in both lanes
}

// Sum over the row group; every thread of the group gets the same value. `scratch` holds 32 floats.
template <bool kBlockRow>
__device__ __forceinline__ float group_sum(float v, float* scratch) {
  v = warp_sum(v);
  if constexpr (kBlockRow) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    __syncthreads();  // the previous call's readers are done with scratch
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_sum(lane < int(blockDim.x / kWarp) ? scratch[lane] : 0.f);
  }
  return v;
}

template <bool kBlockRow>
struct RowGroup {
  int size, lane, index, per_block;
  __device__ RowGroup()
      : size(kBlockRow ? int(blockDim.x) : kWarp),
        lane(kBlockRow ? int(threadIdx.x) : int(threadIdx.x % kWarp)),
        index(kBlockRow ? 0 : int(threadIdx.x / kWarp)),
        per_block(kBlockRow ? 1 : int(blockDim.x / kWarp)) {}
};

template <class T, int N, bool kBlockRow>
__global__ void rmsnorm_forward_kernel(T* __restrict__ y, float* __restrict__ rstd, const T* __restrict__ x,
                                       const T* __restrict__ w, int64_t rows, int D, float eps) {
  __shared__ float scratch[kWarp];
  const RowGroup<kBlockRow> g;
  const int64_t row = int64_t(blockIdx.x) * g.per_block + g.index;
  if (row >= rows) return;  // only in warp mode, where a whole warp leaves together
  const int packs = D / N;
  const T* xr = x + row * D;

  float sum_sq = 0;
  for (int p = g.lane; p < packs; p += g.size) {
    Pack<T, N> a;
    a.load(xr + p * N);
#pragma unroll
    for (int k = 0; k < N; ++k) sum_sq += a.v[k] * a.v[k];
  }
  const float rs = rsqrtf(group_sum<kBlockRow>(sum_sq, scratch) / float(D) + eps);
  if (rstd && g.lane == 0) rstd[row] = rs;

  for (int p = g.lane; p < packs; p += g.size) {
    Pack<T, N> a, wp, out;
    a.load(xr + p * N);
    wp.load(w + p * N);
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = wp.v[k] * (a.v[k] * rs);
    out.store(y + row * D + p * N);
  }
}

// dx = rstd * (g - xhat * mean(g * xhat)) with xhat = x * rstd, g = dy * w. Each row group also sums dy * xhat
// over its rows into its own shared-memory slice; at the end the block writes the sum of its slices to
// dw_partial[blockIdx.x]. Slices are laid out component-major (element k of pack p at k * packs + p) so that the
// lanes of a warp hit consecutive banks.
template <class T, int N, bool kBlockRow>
__global__ void rmsnorm_backward_kernel(T* __restrict__ dx, float* __restrict__ dw_partial, const T* __restrict__ dy,
                                        const T* __restrict__ x, const T* __restrict__ w,
                                        const float* __restrict__ rstd, int64_t rows, int D) {
  extern __shared__ float dw_slices[];  // [groups per block][D]
  __shared__ float scratch[kWarp];
  const RowGroup<kBlockRow> g;
  const int packs = D / N;
  float* dw_acc = dw_slices + int64_t(g.index) * D;
  for (int p = g.lane; p < packs; p += g.size)
#pragma unroll
    for (int k = 0; k < N; ++k) dw_acc[k * packs + p] = 0.f;

  for (int64_t row = int64_t(blockIdx.x) * g.per_block + g.index; row < rows; row += int64_t(gridDim.x) * g.per_block) {
    const float rs = rstd[row];
    const T* xr = x + row * D;
    const T* dyr = dy + row * D;
    float dot = 0;
    for (int p = g.lane; p < packs; p += g.size) {
      Pack<T, N> a, d, wp;
      a.load(xr + p * N);
      d.load(dyr + p * N);
      wp.load(w + p * N);
#pragma unroll
      for (int k = 0; k < N; ++k) dot += d.v[k] * wp.v[k] * a.v[k];
    }
    const float mean_dot = group_sum<kBlockRow>(dot, scratch) * rs / float(D);
    for (int p = g.lane; p < packs; p += g.size) {
      Pack<T, N> a, d, wp, out;
      a.load(xr + p * N);
      d.load(dyr + p * N);
      wp.load(w + p * N);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float xhat = a.v[k] * rs;
        out.v[k] = rs * (d.v[k] * wp.v[k] - xhat * mean_dot);
        dw_acc[k * packs + p] += d.v[k] * xhat;
      }
      out.store(dx + row * D + p * N);
    }
  }

  __syncthreads();
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    const int slot = (c % N) * packs + c / N;
    float s = 0;
    for (int i = 0; i < g.per_block; ++i) s += dw_slices[int64_t(i) * D + slot];
    dw_partial[int64_t(blockIdx.x) * D + c] = s;
  }
}

constexpr int kSumSlices = 16;

// dw[c] += sum over parts of partial[part][c], in a fixed order: slice y sums parts y, y + 16, ..., then slice
// totals are added in slice order.
__global__ void sum_partials_kernel(float* __restrict__ dw, const float* __restrict__ partial, int parts, int D) {
  __shared__ float slice_sum[kSumSlices][kWarp + 1];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  float s = 0;
  if (c < D)
    for (int p = threadIdx.y; p < parts; p += kSumSlices) s += partial[int64_t(p) * D + c];
  slice_sum[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < D) {
    float total = 0;
    for (int i = 0; i < kSumSlices; ++i) total += slice_sum[i][threadIdx.x];
    dw[c] += total;
  }
}

int sm_count() {
  static const int count = [] {
    int n = 0;
    PRIMER_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, cuda::current_device()));
    return n;
  }();
  return count;
}


template <class T, int N, bool kBlockRow>
void forward_with(const Launch& l, T* y, float* rstd, const T* x, const T* w, int64_t rows, int D, float eps) {
  const int64_t blocks = (rows + l.rows_per_block - 1) / l.rows_per_block;
  rmsnorm_forward_kernel<T, N, kBlockRow>
      <<<unsigned(blocks), l.threads, 0, cuda::stream()>>>(y, rstd, x, w, rows, D, eps);
  PRIMER_CUDA_CHECK_LAUNCH();
}

template <class T, int N, bool kBlockRow>
void backward_with(const Launch& l, T* dx, float* dw, const T* dy, const T* x, const T* w, const float* rstd,
                   int64_t rows, int D) {
  auto kernel = rmsnorm_backward_kernel<T, N, kBlockRow>;
  const size_t smem = size_t(l.rows_per_block) * size_t(D) * sizeof(float);
  if (smem > 48 * 1024)
    PRIMER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  PRIMER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, l.threads, smem));
  const int64_t needed = (rows + l.rows_per_block - 1) / l.rows_per_block;
  const int64_t resident = int64_t(sm_count()) * (per_sm > 0 ? per_sm : 1);
  const int parts = int(needed < resident ? needed : resident);

  // Scratch from the stream-ordered pool; its free is ordered after the kernels below.
  const std::shared_ptr<Storage> partial =
      allocate(Device::cuda(cuda::current_device()), size_t(parts) * size_t(D) * sizeof(float));
  auto* partial_ptr = static_cast<float*>(partial->data());
  kernel<<<unsigned(parts), l.threads, smem, cuda::stream()>>>(dx, partial_ptr, dy, x, w, rstd, rows, D);
  PRIMER_CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<unsigned((D + kWarp - 1) / kWarp), dim3(kWarp, kSumSlices), 0, cuda::stream()>>>(
      dw, partial_ptr, parts, D);
  PRIMER_CUDA_CHECK_LAUNCH();
}

template <int N>
using PackWidth = std::integral_constant<int, N>;
template <bool B>
using BlockRow = std::integral_constant<bool, B>;

// Calls fn(PackWidth<N>, BlockRow<kBlockRow>, launch) for the pack width and row-group kind that fit D.
template <class T, class F>
void with_layout(int64_t D, bool vec16, F&& fn) {
  constexpr int V = kVec16<T>;
  const Launch l = launch_for(vec16 ? D / V : D);
  if (vec16 && l.block_per_row)
    fn(PackWidth<V>{}, BlockRow<true>{}, l);
  else if (vec16)
    fn(PackWidth<V>{}, BlockRow<false>{}, l);
  else if (l.block_per_row)
    fn(PackWidth<1>{}, BlockRow<true>{}, l);
  else
    fn(PackWidth<1>{}, BlockRow<false>{}, l);
}

}  // namespace

void rmsnorm_forward(void* y, float* rstd, const void* x, const void* w, int64_t rows, int64_t D, float eps,
                     DType dtype) {
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_layout<T>(D, use_vec16<T>(D, {y, x, w}), [&](auto n, auto block_row, const Launch& l) {
      forward_with<T, decltype(n)::value, decltype(block_row)::value>(
          l, static_cast<T*>(y), rstd, static_cast<const T*>(x), static_cast<const T*>(w), rows, int(D), eps);
    });
  });
}

void rmsnorm_backward(void* dx, float* dw_accum, const void* dy, const void* x, const void* w, const float* rstd,
                      int64_t rows, int64_t D, DType dtype) {
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_layout<T>(D, use_vec16<T>(D, {dx, dy, x, w}), [&](auto n, auto block_row, const Launch& l) {
      backward_with<T, decltype(n)::value, decltype(block_row)::value>(
          l, static_cast<T*>(dx), dw_accum, static_cast<const T*>(dy), static_cast<const T*>(x),
          static_cast<const T*>(w), rstd, rows, int(D));
    });
  });
}

}  // namespace primer::ops::cuda_ops
