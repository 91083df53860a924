#include <algorithm>
#include <type_traits>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/block_reduce.cuh"
#include "core/ops/cuda/tile/device_types.cuh"
#include "core/ops/cuda/reduce.h"
#include "core/ops/cuda/tile/vector_io.cuh"
#include "core/storage.h"

// Every sum has a fixed order that depends only on the shape: a reduced run is cut into `splits` chunks (a constant
// block target, not the GPU's SM count), each chunk is tree-reduced in fp32 by one block into a partial, and a second
// pass reduces the partials the same way. No atomics.
namespace primer::ops::cuda_ops {
namespace {

constexpr int kRowThreads = 256;
constexpr int kColX = 32, kColY = 8;     // 32 threads on neighbouring columns (coalesced) x 8 row lanes
constexpr int64_t kTargetBlocks = 1024;  // fills an H100 several times over
constexpr int64_t kMinRowChunk = 4096;   // elements per block below which splitting a row does not pay
constexpr int64_t kMinColChunk = 64;     // rows per block likewise for column sums
constexpr int64_t kWarpRowMax = 1024;    // rows up to this long get a warp each, not a block of mostly idle threads
constexpr int64_t kShortColRows = 2 * kColY;  // column sums over fewer rows: a thread adds them alone

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t split_count(int64_t independent_blocks, int64_t length, int64_t min_chunk) {
  return std::clamp<int64_t>(ceil_div(kTargetBlocks, independent_blocks), 1, ceil_div(length, min_chunk));
}

// Block b reduces chunk (b % splits) of row (b / splits) of x [rows, r]; out[b] = multiplier * sum.
template <bool Square, class In, class Out>
__global__ void row_sum_kernel(Out* out, const In* x, int64_t r, int64_t chunk, int64_t splits, float multiplier) {
  cuda::await_prior_grid();
  const int64_t row = blockIdx.x / splits, begin = (blockIdx.x % splits) * chunk;
  const int64_t end = begin + chunk < r ? begin + chunk : r;
  float acc = 0.f;
  if (begin < end) {
    row_foreach(
        {int(threadIdx.x), int(blockDim.x)}, end - begin, [&](int64_t, float v) { acc += Square ? v * v : v; },
        x + row * r + begin);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) out[blockIdx.x] = from_float<Out>(acc * multiplier);
}

// Short rows (a head's width): warp w of the grid sums row w; out[row] = multiplier * sum.
template <bool Square, class In, class Out>
__global__ void row_sum_warp_kernel(Out* out, const In* x, int64_t rows, int64_t r, float multiplier) {
  cuda::await_prior_grid();
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = int(threadIdx.x % 32);
  float acc = 0.f;
  row_foreach(
      {lane, 32}, r, [&](int64_t, float v) { acc += Square ? v * v : v; }, x + row * r);
  acc = warp_sum(acc);
  if (lane == 0) out[row] = from_float<Out>(acc * multiplier);
}

// x [outer, r, inner] with few rows r (e.g. the G copies of a GQA head expansion): each thread sums V neighbouring
// columns of one o over the r rows, in order; out [outer, inner] = multiplier * sums.
template <int V, class In, class Out>
__global__ void col_sum_short_kernel(Out* out, const In* x, int64_t outer, int64_t r, int64_t inner, float multiplier) {
  cuda::await_prior_grid();
  const int64_t packs_per_row = inner / V, packs = outer * packs_per_row;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = p / packs_per_row, c = (p - o * packs_per_row) * V;
    float acc[V] = {};
    for (int64_t k = 0; k < r; ++k) {
      const Pack<In, V> in = load_run<V>(x + (o * r + k) * inner + c, 1);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += to_float(in.v[j]);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) out[o * inner + c + j] = from_float<Out>(acc[j] * multiplier);
  }
}

// x [outer, r, inner]: block (column tile, chunk, o) sums its chunk of r for 32 * V columns, V neighbouring
// columns per thread (one vector load per row when V > 1); out [outer, splits, inner] = multiplier * partial sums.
template <int V, class In, class Out> __global__ void col_sum_kernel(Out* out, const In* x, int64_t r, int64_t inner,
                                                                     int64_t chunk, int64_t splits, float multiplier) {
  cuda::await_prior_grid();
  const int64_t tiles = (inner + kColX * V - 1) / (kColX * V);
  const int64_t tile = blockIdx.x % tiles, rest = blockIdx.x / tiles;
  const int64_t split = rest % splits, o = rest / splits;
  const int64_t c = (tile * kColX + threadIdx.x) * V;  // first of this thread's columns; V divides inner
  const int64_t begin = split * chunk, end = begin + chunk < r ? begin + chunk : r;
  float acc[V] = {};
  if (c < inner) {
    for (int64_t k = begin + threadIdx.y; k < end; k += kColY) {
      const Pack<In, V> p = load_run<V>(x + (o * r + k) * inner + c, 1);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += to_float(p.v[j]);
    }
  }
  __shared__ float lanes[kColY][V][kColX + 1];
#pragma unroll
  for (int j = 0; j < V; ++j) lanes[threadIdx.y][j][threadIdx.x] = acc[j];
  __syncthreads();
  if (threadIdx.y == 0 && c < inner) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float s = 0.f;
#pragma unroll
      for (int y = 0; y < kColY; ++y) s += lanes[y][j][threadIdx.x];
      out[(o * splits + split) * inner + c + j] = from_float<Out>(s * multiplier);
    }
  }
}

// Scratch for partial sums, freed in stream order after the kernels that use it.
std::shared_ptr<Storage> partial_buffer(int64_t floats) {
  return allocate(Device::cuda(cuda::current_device()), size_t(floats) * sizeof(float));
}

template <class In, class Out>
void reduce_rows(Out* out, const In* x, int64_t rows, int64_t r, bool squares, float multiplier) {
  const int64_t splits = split_count(rows, r, kMinRowChunk);
  if (splits == 1 && r <= kWarpRowMax) {
    constexpr int kWarps = kRowThreads / 32;
    const unsigned blocks = unsigned(ceil_div(rows, kWarps));
    cuda::launch_dependent(squares ? row_sum_warp_kernel<true, In, Out> : row_sum_warp_kernel<false, In, Out>, blocks,
                           kRowThreads, 0, out, x, rows, r, multiplier);
    return;
  }
  auto launch = [&](auto* dst, const auto* src, int64_t length, int64_t chunk, int64_t parts, bool sq, float mult) {
    const unsigned blocks = unsigned(rows * parts);
    using I = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
    using O = std::remove_pointer_t<decltype(dst)>;
    cuda::launch_dependent(sq ? row_sum_kernel<true, I, O> : row_sum_kernel<false, I, O>, blocks, kRowThreads, 0, dst,
                           src, length, chunk, parts, mult);
  };
  if (splits == 1) return launch(out, x, r, r, 1, squares, multiplier);
  const auto partial = partial_buffer(rows * splits);
  float* p = static_cast<float*>(partial->data());
  launch(p, x, r, ceil_div(r, splits), splits, squares, 1.f);
  launch(out, static_cast<const float*>(p), splits, splits, 1, false, multiplier);
}

// One column-sum pass over x [outer, r, inner] into out [outer, splits, inner].
template <class In, class Out>
void launch_columns(Out* out, const In* x, int64_t outer, int64_t r, int64_t inner, int64_t splits, float multiplier) {
  constexpr int V = kPack<In>;
  const dim3 threads(kColX, kColY);
  const int64_t chunk = ceil_div(r, splits);
  if (inner % V == 0 && pack_aligned<V>(x)) {
    const unsigned blocks = unsigned(outer * splits * ceil_div(inner, kColX * V));
    cuda::launch_dependent(col_sum_kernel<V, In, Out>, blocks, threads, 0, out, x, r, inner, chunk, splits, multiplier);
  } else {
    const unsigned blocks = unsigned(outer * splits * ceil_div(inner, kColX));
    cuda::launch_dependent(col_sum_kernel<1, In, Out>, blocks, threads, 0, out, x, r, inner, chunk, splits, multiplier);
  }
}

template <class T> void reduce_columns(T* out, const T* x, int64_t outer, int64_t r, int64_t inner, float multiplier) {
  if (r < kShortColRows) {
    constexpr int V = kPack<T>;
    if (inner % V == 0 && pack_aligned<V>(x))
      cuda::launch_dependent(col_sum_short_kernel<V, T, T>, grid_for(outer * inner / V, kRowThreads), kRowThreads, 0,
                             out, x, outer, r, inner, multiplier);
    else
      cuda::launch_dependent(col_sum_short_kernel<1, T, T>, grid_for(outer * inner, kRowThreads), kRowThreads, 0, out,
                             x, outer, r, inner, multiplier);
    return;
  }
  const int64_t splits = split_count(outer * ceil_div(inner, kColX * kPack<T>), r, kMinColChunk);
  if (splits == 1) return launch_columns(out, x, outer, r, inner, 1, multiplier);
  const auto partial = partial_buffer(outer * splits * inner);
  float* p = static_cast<float*>(partial->data());
  launch_columns(p, x, outer, r, inner, splits, 1.f);
  launch_columns(out, static_cast<const float*>(p), outer, splits, inner, 1, multiplier);
}

}  // namespace

void sum_dim(void* out, const void* x, DType dtype, int64_t outer, int64_t r, int64_t inner, double multiplier) {
  visit_float(dtype, [&](auto t) {
    using T = decltype(t);
    if (inner == 1)
      reduce_rows(static_cast<T*>(out), static_cast<const T*>(x), outer, r, false, float(multiplier));
    else
      reduce_columns(static_cast<T*>(out), static_cast<const T*>(x), outer, r, inner, float(multiplier));
  });
}

void sum_all(void* out, const void* x, DType dtype, int64_t n, bool squares) {
  visit_float(dtype, [&](auto t) {
    using T = decltype(t);
    reduce_rows(static_cast<float*>(out), static_cast<const T*>(x), 1, n, squares, 1.f);
  });
}

}  // namespace primer::ops::cuda_ops
