#include <algorithm>
#include <memory>
#include <type_traits>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
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

// The fewest packs per thread that keep a row within kMaxRowThreads threads. Rows of at most a warp's packs get the
// smallest power-of-two group that holds them (a head-wide bf16 row of 128: 16 threads, two rows a warp), so no lane
// idles. With warp_rows, rows of up to kMaxPacksPerThread packs a lane take one warp each: the row's sum is then
// shuffles only (no block barrier), and a thread has several loads in flight (the forward at hidden 1024, 128 packs:
// 4 a lane instead of 1 on each of 128 threads and two barriers).
Layout layout_for(int64_t packs, bool warp_rows) {
  if (packs <= kWarp) {
    int row_threads = 1;
    while (row_threads < packs) row_threads *= 2;
    return {1, row_threads, kMaxRowThreads / row_threads};
  }
  if (warp_rows && packs <= kWarp * kMaxPacksPerThread) {
    int P = 2;
    while (P * kWarp < packs) P *= 2;
    return {P, kWarp, kMaxRowThreads / kWarp};
  }
  int P = 1;
  while (P < kMaxPacksPerThread && (packs + P - 1) / P > kMaxRowThreads) P *= 2;
  const int row_threads = int(((packs + P - 1) / P + kWarp - 1) / kWarp * kWarp);
  return {P, row_threads, kMaxRowThreads / row_threads};
}

// Sum over each row group of `row_threads` consecutive threads; every thread receives its group's sum. Groups of at
// most a warp reduce by shuffles within their aligned lanes; wider ones meet in `scratch` (one float per warp), so
// all threads of the block must call this together.
__device__ __forceinline__ float group_sum(float v, int row_threads, float* scratch) {
  if (row_threads <= kWarp) {
    for (int offset = row_threads / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
  }
  v = warp_sum(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps_per_group = row_threads / kWarp;
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int first = warp / warps_per_group * warps_per_group;
  return warp_sum(lane < warps_per_group ? scratch[first + lane] : 0.f);
}

template <int kGate> struct GateTerms {
  float u, s, ds;
  __device__ __forceinline__ GateTerms(float x, float z) {
    if constexpr (kGate == 0) {
      u = x, s = 1.f, ds = 0.f;
    } else {
      const float sig = __frcp_rn(1.f + expf(-z));  // 0 where expf overflows: silu → −0, no NaN
      s = z * sig;
      ds = sig * (1.f + z * (1.f - sig));
      u = kGate == 2 ? x * s : x;
    }
  }
};

// The rows of a per-head weight [G, D] repeat every G rows; null: unit weight.
template <class T> __device__ __forceinline__ const T* weight_row(const T* w, int64_t row, int G, int D) {
  return w ? w + (row % G) * D : nullptr;
}

// y = w·u·rs (·s under gate after) with rs = rsqrt(Σu² / n_div + eps), n_div = D (RMSNorm) or 1 (L2).
template <class T, int N, bool kWide, int P, int kGate> __global__ void __launch_bounds__(kMaxRowThreads)
    rmsnorm_forward_kernel(T* __restrict__ y, float* __restrict__ rstd, const T* __restrict__ x,
                           const T* __restrict__ w, const T* __restrict__ z, int64_t rows, int D, int G,
                           int row_threads, float eps, float n_div) {
  cuda::await_prior_grid();
  __shared__ float scratch[kMaxRowThreads / kWarp];
  const int lane = threadIdx.x % row_threads, packs = D / N;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / row_threads) + threadIdx.x / row_threads;
  const bool active = row < rows;  // idle groups of the last block still take part in group_sum

  constexpr int kS = kGate == 1 ? P : 1;  // silu(z) is kept for the output pass only under gate after
  float u[P][N], s[kS][N];
  float sum_sq = 0;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int p = lane + j * row_threads;
    if (active && p < packs) {
      Pack<T, N, kWide> xp, zp;
      xp.load(x + row * D + p * N);
      if constexpr (kGate != 0) zp.load(z + row * D + p * N);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const GateTerms<kGate> t(xp[k], kGate != 0 ? zp[k] : 0.f);
        u[j][k] = t.u;
        if constexpr (kGate == 1) s[j][k] = t.s;
        sum_sq += t.u * t.u;
      }
    }
  }
  const float rs = rsqrtf(group_sum(sum_sq, row_threads, scratch) / n_div + eps);
  if (!active) return;
  if (rstd && lane == 0) rstd[row] = rs;
  const T* wr = weight_row(w, row, G, D);
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int p = lane + j * row_threads;
    if (p < packs) {
      Pack<T, N, kWide> wp, out;
      if (wr) wp.load(wr + p * N);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float n = (wr ? wp[k] : 1.f) * (u[j][k] * rs);
        if constexpr (kGate == 1)
          out.set(k, n * s[j][k]);
        else
          out.set(k, n);
      }
      out.store(y + row * D + p * N);
    }
  }
}

// Rows of x, dy (and z) staged ahead of use per thread (AsyncRows): more for short rows, so that a block keeps about
// 32-64 KB in flight. Narrow packs (unaligned data) are read in place.
template <int P> constexpr int kBackwardDepth = P <= 2 ? 4 : 2;
template <class T, int N, bool kWide, int P, int kGate> using BackwardRows =
    AsyncRows<int(sizeof(T)) * N, (kGate != 0 ? 3 : 2) * P, kBackwardDepth<P>, kWide>;

// With û = u·rs and g = dy·w (·s under gate after): du = rs·(g − û·Σ(g·û)/n_div); dx = du (·s under gate before);
// dz = du·x·silu'(z) (before) or dy·w·û·silu'(z) (after). Blocks stride over the rows by a multiple of G, so each
// thread's rows share one weight row; each thread sums dy·û (·s) for the columns it owns in registers and finally
// writes them to its group's row of dw_partial ([gridDim.x * groups per block, D]; part p holds weight row p mod G),
// which sum_partials_kernel reduces in a fixed order. The next rows' inputs are copied into shared memory while the
// current row is reduced and written.
template <class T, int N, bool kWide, int P, int kGate> __global__ void __launch_bounds__(kMaxRowThreads)
    rmsnorm_backward_kernel(T* __restrict__ dx, T* __restrict__ dz, float* __restrict__ dw_partial,
                            const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                            const T* __restrict__ z, const float* __restrict__ rstd, int64_t rows, int D, int G,
                            int row_threads, float n_div, bool x_is_output) {
  cuda::await_prior_grid();
  extern __shared__ __align__(16) unsigned char staged[];
  __shared__ float scratch[kMaxRowThreads / kWarp];
  const int lane = threadIdx.x % row_threads, group = threadIdx.x / row_threads;
  const int groups = blockDim.x / row_threads, packs = D / N;
  const int64_t first_row = int64_t(blockIdx.x) * groups, step = int64_t(gridDim.x) * groups;

  // Unit j < P of iteration i is pack j of the thread's x row, unit P + j the same pack of dy, unit 2P + j of z
  // (null: none).
  constexpr int kUnits = (kGate != 0 ? 3 : 2) * P;
  BackwardRows<T, N, kWide, P, kGate> staging(staged, threadIdx.x, blockDim.x);
  auto fetch = [&](int64_t i) {
    const int64_t row = first_row + i * step + group;
    const void* src[kUnits];
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const int p = lane + j * row_threads;
      const bool valid = row < rows && p < packs;
      src[j] = valid ? x + row * D + p * N : nullptr;
      src[P + j] = valid ? dy + row * D + p * N : nullptr;
      if constexpr (kGate != 0) src[2 * P + j] = valid ? z + row * D + p * N : nullptr;
    }
    staging.fetch(i, src);
  };
  for (int i = 0; i < kBackwardDepth<P> - 1; ++i) fetch(i);

  const T* wr = weight_row(w, first_row + group, G, D);
  Pack<T, N, kWide> ws[P];
#pragma unroll
  for (int j = 0; j < P; ++j)
    if (wr && lane + j * row_threads < packs) ws[j].load(wr + (lane + j * row_threads) * N);
  float dw[P][N] = {};

  // Every thread runs the same number of iterations: group_sum synchronises the block.
  for (int64_t i = 0; first_row + i * step < rows; ++i) {
    const int64_t row = first_row + i * step + group;
    const bool active = row < rows;
    const float rs = active ? rstd[row] : 0.f;
    const float to_uhat = x_is_output ? 1.f : rs;  // û = u·r, or x itself when it is the output
    Pack<T, N, kWide> xs[P], ds[P], zs[P];
    constexpr int kC = kGate != 0 ? P : 1;  // the gate's terms, computed once per element
    float gu[kC][N], gs[kC][N], gds[kC][N];
    float dot = 0;
    staging.wait();
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const int p = lane + j * row_threads;
      if (active && p < packs) {
        xs[j].load(static_cast<const T*>(staging.at(i, j, x + row * D + p * N)));
        ds[j].load(static_cast<const T*>(staging.at(i, P + j, dy + row * D + p * N)));
        if constexpr (kGate != 0) zs[j].load(static_cast<const T*>(staging.at(i, 2 * P + j, z + row * D + p * N)));
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const GateTerms<kGate> t(xs[j][k], kGate != 0 ? zs[j][k] : 0.f);
          if constexpr (kGate != 0) gu[j][k] = t.u, gs[j][k] = t.s, gds[j][k] = t.ds;
          const float dy_k = kGate == 1 ? ds[j][k] * t.s : ds[j][k];
          dot += dy_k * (wr ? ws[j][k] : 1.f) * t.u;
        }
      }
    }
    fetch(i + kBackwardDepth<P> - 1);
    const float mean_dot = group_sum(dot, row_threads, scratch) * to_uhat / n_div;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const int p = lane + j * row_threads;
      if (active && p < packs) {
        Pack<T, N, kWide> dx_out, dz_out;
#pragma unroll
        for (int k = 0; k < N; ++k) {
          GateTerms<0> t(xs[j][k], 0.f);
          if constexpr (kGate != 0) t.u = gu[j][k], t.s = gs[j][k], t.ds = gds[j][k];
          const float dy_k = kGate == 1 ? ds[j][k] * t.s : ds[j][k], w_k = wr ? ws[j][k] : 1.f;
          const float uhat = t.u * to_uhat, du = rs * (dy_k * w_k - uhat * mean_dot);
          if constexpr (kGate == 2) {
            dx_out.set(k, du * t.s);
            dz_out.set(k, du * xs[j][k] * t.ds);
          } else {
            dx_out.set(k, du);
            if constexpr (kGate == 1) dz_out.set(k, ds[j][k] * w_k * uhat * t.ds);
          }
          dw[j][k] += dy_k * uhat;
        }
        dx_out.store(dx + row * D + p * N);
        if constexpr (kGate != 0) dz_out.store(dz + row * D + p * N);
      }
    }
  }

  if (!wr) return;
  float* part = dw_partial + (int64_t(blockIdx.x) * groups + group) * D;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int p = lane + j * row_threads;
    if (p < packs)
#pragma unroll
      for (int k = 0; k < N; ++k) part[p * N + k] = dw[j][k];
  }
}

// A block of 32 columns x 32 slices. Head-wide rows leave thousands of parts (one per resident row group), so the
// parts of a weight row are split among `splits` blocks whose totals a second pass adds in order: enough blocks to
// fill the GPU, each thread summing a handful of loads in flight.
constexpr int kSumSlices = 32;

// Weight row g's parts are p_j = g + j·G, j < J = parts / G; block z of the grid (⌈D / 32⌉, G, splits) sums
// j ∈ [z·J / splits, (z + 1)·J / splits), slice y taking every kSumSlices-th j from y, then the slice totals in
// order. With one split the total is added to dw[g, c]; else it goes to split_sums[z, g, c].
__global__ void sum_partials_kernel(float* __restrict__ dw, float* __restrict__ split_sums,
                                    const float* __restrict__ partial, int parts, int D, int G) {
  cuda::await_prior_grid();
  __shared__ float slice_sum[kSumSlices][kWarp + 1];
  const int c = blockIdx.x * kWarp + threadIdx.x, g = blockIdx.y, z = blockIdx.z, splits = gridDim.z;
  const int J = parts / G, j_begin = int(int64_t(J) * z / splits), j_end = int(int64_t(J) * (z + 1) / splits);
  float s = 0;
  if (c < D)
#pragma unroll 4
    for (int j = j_begin + threadIdx.y; j < j_end; j += kSumSlices) s += partial[(int64_t(g) + int64_t(j) * G) * D + c];
  slice_sum[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < D) {
    float total = 0;
    for (int i = 0; i < kSumSlices; ++i) total += slice_sum[i][threadIdx.x];
    if (splits == 1)
      dw[int64_t(g) * D + c] += total;
    else
      split_sums[(int64_t(z) * G + g) * D + c] = total;
  }
}

// dw[i] += Σ_z split_sums[z, i] in split order, i < G·D.
__global__ void sum_splits_kernel(float* __restrict__ dw, const float* __restrict__ split_sums, int splits, int64_t n) {
  cuda::await_prior_grid();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float total = 0;
  for (int z = 0; z < splits; ++z) total += split_sums[z * n + i];
  dw[i] += total;
}

template <class T> struct NormArgs {
  T *y, *dx, *dz;
  float *rstd, *dw;
  const T *x, *w, *z, *dy;
  const float* rstd_in;
};

template <class T, int N, bool kWide, int P, int kGate>
void forward_with(const Layout& l, const NormArgs<T>& a, const NormShape& s, float eps) {
  const int64_t blocks = (s.rows + l.rows_per_block - 1) / l.rows_per_block;
  cuda::launch_dependent(rmsnorm_forward_kernel<T, N, kWide, P, kGate>, unsigned(blocks), l.threads(), 0, a.y, a.rstd,
                         a.x, a.w, a.z, s.rows, int(s.D), int(s.weight_rows), l.row_threads, eps,
                         s.l2 ? 1.f : float(s.D));
}

int gcd(int a, int b) { return b == 0 ? a : gcd(b, a % b); }

template <class T, int N, bool kWide, int P, int kGate>
void backward_with(const Layout& l, const NormArgs<T>& a, const NormShape& s) {
  auto kernel = rmsnorm_backward_kernel<T, N, kWide, P, kGate>;
  const size_t smem = BackwardRows<T, N, kWide, P, kGate>::smem_bytes(l.threads());
  PRIMER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  PRIMER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, l.threads(), smem));
  const int64_t needed = (s.rows + l.rows_per_block - 1) / l.rows_per_block;
  const int64_t resident = int64_t(sm_count()) * (per_sm > 0 ? per_sm : 1);
  int blocks = int(needed < resident ? needed : resident);
  // Per-head weights: the row step (blocks · rows per block) must be a multiple of G so that each row group's rows
  // share one weight row; surplus blocks find no rows and contribute zero partials.
  const int G = s.weight_rows > 0 ? int(s.weight_rows) : 1;
  const int multiple = G / gcd(G, l.rows_per_block);
  blocks = (blocks + multiple - 1) / multiple * multiple;
  const int parts = blocks * l.rows_per_block;

  // Scratch from the stream-ordered pool; its free is ordered after the kernels below.
  std::shared_ptr<Storage> partial;
  float* partial_ptr = nullptr;
  if (a.dw) {
    partial = allocate(Device::cuda(cuda::current_device()), size_t(parts) * size_t(s.D) * sizeof(float));
    partial_ptr = static_cast<float*>(partial->data());
  }
  cuda::launch_dependent(kernel, unsigned(blocks), l.threads(), smem, a.dx, a.dz, partial_ptr, a.dy, a.x, a.w, a.z,
                         a.rstd_in, s.rows, int(s.D), G, l.row_threads, s.l2 ? 1.f : float(s.D), s.from_output);
  if (!a.dw) return;
  // Splits so that about two blocks per SM sum, each slice over at least ~4 parts.
  const int column_blocks = int((s.D + kWarp - 1) / kWarp), per_row = parts / G;
  const int splits = std::max(1, std::min(2 * sm_count() / (column_blocks * G), per_row / (4 * kSumSlices)));
  std::shared_ptr<Storage> split_sums;
  float* split_ptr = nullptr;
  if (splits > 1) {
    split_sums = allocate(Device::cuda(cuda::current_device()), size_t(splits) * size_t(G * s.D) * sizeof(float));
    split_ptr = static_cast<float*>(split_sums->data());
  }
  cuda::launch_dependent(sum_partials_kernel, dim3(unsigned(column_blocks), unsigned(G), unsigned(splits)),
                         dim3(kWarp, kSumSlices), 0, a.dw, split_ptr, partial_ptr, parts, int(s.D), G);
  if (splits == 1) return;
  const int64_t n = int64_t(G) * s.D;
  cuda::launch_dependent(sum_splits_kernel, unsigned((n + 255) / 256), 256, 0, a.dw, split_ptr, splits, n);
}

template <auto V> using Const = std::integral_constant<decltype(V), V>;

// Calls fn(Const<N>, Const<kWide>, Const<P>, layout) for the pack kind and packs per thread that fit a row of D:
// wide 16-byte packs when D is a multiple of one and the data is aligned, narrow packs of the same width when only
// the alignment is missing, single elements otherwise. warp_rows as layout_for's.
template <class T, class F> void with_layout(int64_t D, bool aligned, bool warp_rows, F&& fn) {
  constexpr int V = kVec16<T>;
  auto by_packs_per_thread = [&](auto n, auto wide) {
    const Layout l = layout_for(D / decltype(n)::value, warp_rows);
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

// The gated variants exist for rows of whole 16-byte packs, at most 2 a thread (kRmsNormGatedMaxPacks; head-wide
// rows), which ops::rmsnorm checks: a third as many kernels to compile.
constexpr bool instantiated(int gate, int N, int P) {
  return gate == 0 || (N > 1 && P * kMaxRowThreads <= kRmsNormGatedMaxPacks);
}

// Calls fn(Const<kGate>) for the variant's gate.
template <class F> void with_gate(int gate, F&& fn) {
  switch (gate) {
    case 0: return fn(Const<0>{});
    case 1: return fn(Const<1>{});
    default: return fn(Const<2>{});
  }
}

}  // namespace

void rmsnorm_forward(void* y, float* rstd, const void* x, const void* w, const void* z, const NormShape& s, float eps) {
  visit_float(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    NormArgs<T> a{};
    a.y = static_cast<T*>(y), a.rstd = rstd, a.x = static_cast<const T*>(x), a.w = static_cast<const T*>(w),
    a.z = static_cast<const T*>(z);
    with_gate(s.gate, [&](auto gate) {
      constexpr int kGate = decltype(gate)::value;
      // Warp rows for the plain norm only: the gated kernels exist for up to 2 packs a thread. (The backward keeps
      // wider groups: its dw partials are one row of D floats per group.)
      with_layout<T>(s.D, aligned16({y, x, w, z}), kGate == 0, [&](auto n, auto wide, auto P, const Layout& l) {
        if constexpr (instantiated(kGate, decltype(n)::value, decltype(P)::value))
          forward_with<T, decltype(n)::value, decltype(wide)::value, decltype(P)::value, kGate>(l, a, s, eps);
      });
    });
  });
}

void rmsnorm_backward(void* dx, void* dz, float* dw_accum, const void* dy, const void* x, const void* w, const void* z,
                      const float* rstd, const NormShape& s) {
  visit_float(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    NormArgs<T> a{};
    a.dx = static_cast<T*>(dx), a.dz = static_cast<T*>(dz), a.dw = dw_accum, a.dy = static_cast<const T*>(dy),
    a.x = static_cast<const T*>(x), a.w = static_cast<const T*>(w), a.z = static_cast<const T*>(z), a.rstd_in = rstd;
    with_gate(s.gate, [&](auto gate) {
      constexpr int kGate = decltype(gate)::value;
      with_layout<T>(s.D, aligned16({dx, dz, dy, x, w, z}), false, [&](auto n, auto wide, auto P, const Layout& l) {
        if constexpr (instantiated(kGate, decltype(n)::value, decltype(P)::value))
          backward_with<T, decltype(n)::value, decltype(wide)::value, decltype(P)::value, kGate>(l, a, s);
      });
    });
  });
}

}  // namespace primer::ops::cuda_ops
