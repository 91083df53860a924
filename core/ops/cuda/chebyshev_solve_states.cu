// The two sequential passes over chunks of the chunked Chebyshev solve, one CTA per (64 x 64 tile of the D x D
// state, batch·head), the tile in fp32 registers (4 warps, 16 rows each):
//   forward:  H ← ζ_L H + Σ_j e^{G_L−G_j} k_j k_jᵀ                          (the chunk-start states)
//   backward: Ĥ ← ζ_L Ĥ − Σ_t ζ_t s_t x_tᵀ − ½ζ_0²W_0 H_0 − ½ Σ_j ζ_j W_j k_j k_jᵀ   (the state gradient)
// (derived in core/ops/cpu/chebyshev_solve.cpp). Each chunk's update is one tensor-core product with
// the chunk's tokens as the reduction dimension; in f32 (precise, chebyshev_solve.h) s and x enter it as hi + lo:
// the product runs over the chunk's tokens twice more, pairing s's residual with x and s with x's.
// The backward's product runs through tile/tile_products.cuh: on Hopper by warpgroup MMA, the CTA's four warps one
// warpgroup (its tiles are [tokens][64], whose swizzle, RowSwizzle<64>, is the 128-byte swizzle's one column block:
// both ways read them); H200, B 4, T 4096, precise: 0.528 -> 0.498 ms. The forward's (two 64-deep products a chunk)
// gained nothing that way (0.246 ms either way; bf16 keys 0.279 -> 0.294), so it stays on mma.sync.
#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/block_reduce.cuh"
#include "core/ops/cuda/chebyshev_solve_common.cuh"
#include "core/ops/cuda/chebyshev_solve_kernels.h"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/tile/tile_products.cuh"
#include "core/ops/cuda/wgmma_available.h"

namespace primer::ops::cuda_ops::cheb {
namespace {

constexpr int kThreads = 128;

// This thread's elements of the tile: rows 16·warp + g (+8), columns 8·nt + 2t (+1); element e of acc[nt].
struct TileLane {
  int row0, col0, warp, lane;  // tile origin in the D x D matrix
  __device__ int row(int e) const { return row0 + 16 * warp + (lane >> 2) + 8 * (e >> 1); }
  __device__ int col(int nt, int e) const { return col0 + 8 * nt + 2 * (lane & 3) + (e & 1); }
};

template <int D> __device__ __forceinline__ void load_tile(float (&acc)[8][4], const float* m, const TileLane& tl) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = m ? m[tl.row(e) * D + tl.col(nt, e)] : 0.f;
}

template <int D>
__device__ __forceinline__ void store_tile_f32(float* m, const float (&acc)[8][4], const TileLane& tl) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; e += 2)
      *reinterpret_cast<float2*>(m + tl.row(e) * D + tl.col(nt, e)) = make_float2(acc[nt][e], acc[nt][e + 1]);
}

struct StatesArgs {
  const void* k;
  const float* gk;        // may be null
  const float* state_in;  // may be null
  float* states;
  float* state_out;  // may be null
  Geom geo;
};

template <int D, class T> __global__ void __launch_bounds__(kThreads) chunk_states_kernel(StatesArgs a) {
  cuda::await_prior_grid();
  __shared__ __align__(128) bf16 s_hi[kC * 64], s_lo[kC * 64], s_b[kC * 64];
  __shared__ float s_g[kC], s_m[kC];
  constexpr int kTilesPerSide = D / 64;
  const TileLane tl{int(blockIdx.x / kTilesPerSide) * 64, int(blockIdx.x % kTilesPerSide) * 64, int(threadIdx.x >> 5),
                    int(threadIdx.x & 31)};
  const int64_t bh = blockIdx.y;
  const T* k = static_cast<const T*>(a.k);

  float acc[8][4];
  load_tile<D>(acc, a.state_in ? a.state_in + bh * D * D : nullptr, tl);
  // The chunk's keys at the tile's rows and at its columns, loaded one chunk ahead (during the previous product).
  RowPieces<T, 64, kThreads> rows_r, rows_c;
  auto load_keys = [&](const ChunkRef& c) {
    rows_r.load(k + c.row0, c.row_stride, tl.row0, c.len);
    rows_c.load(k + c.row0, c.row_stride, tl.col0, c.len);
  };
  ChunkGates gates;
  load_keys(a.geo.chunk(bh, 0, D));
  gates.load(a.gk, a.geo.chunk(bh, 0, D));
  for (int n = 0; n < a.geo.N; ++n) {
    const ChunkRef c = a.geo.chunk(bh, n, D);
    store_tile_f32<D>(a.states + a.geo.state(bh, n, D), acc, tl);
    gates.scan(s_g);
    if (n + 1 < a.geo.N) gates.load(a.gk, a.geo.chunk(bh, n + 1, D));
    __syncthreads();
    const float G_last = s_g[c.len - 1];
    if (threadIdx.x < kC) s_m[threadIdx.x] = int(threadIdx.x) < c.len ? __expf(G_last - s_g[threadIdx.x]) : 0.f;
    __syncthreads();
    // A[r][j] = e^{G_L−G_j} k_j[r] as hi + lo (the decayed keys carry the state's precision), B[j][c] = k_j[c].
    rows_r.store(s_hi, s_lo, s_m);
    rows_c.store(s_b, nullptr, nullptr);
    __syncthreads();
    if (n + 1 < a.geo.N) load_keys(a.geo.chunk(bh, n + 1, D));
    const float zeta_last = __expf(G_last);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][e] *= zeta_last;
    tile::mma_AtB<kC, 64, 64>(acc, s_hi, s_b, 16 * tl.warp, 0, tl.lane);
    tile::mma_AtB<kC, 64, 64>(acc, s_lo, s_b, 16 * tl.warp, 0, tl.lane);
    __syncthreads();  // the next chunk restages the tiles
  }
  store_tile_f32<D>(a.states + a.geo.state(bh, a.geo.N, D), acc, tl);
  if (a.state_out) store_tile_f32<D>(a.state_out + bh * D * D, acc, tl);
}

struct StateGradArgs {
  const void *s, *x, *k;  // s may be null (num_iter = 0)
  const float* gk;        // may be null
  const float* W;
  const float* states;
  const float* dstate_out;  // may be null
  float* dstates;
  float* hdot;
  float* dstate_in;  // may be null
  Geom geo;
};

// Dynamic shared memory: A and B below, over 2·64 tokens (4·64 when precise); then the next chunk's keys at the tile's
// rows and at its columns as loaded (T), on their way in.
template <class T> constexpr int state_gradients_smem_bytes() {
  return 2 * (std::is_same_v<T, float> ? 4 : 2) * kC * 64 * int(sizeof(bf16)) + 2 * kC * 64 * int(sizeof(T));
}

template <int D, class T, class P> __global__ void __launch_bounds__(kThreads) state_gradients_kernel(StateGradArgs a) {
  cuda::await_prior_grid();
  constexpr bool kPrecise = std::is_same_v<T, float>;
  // The chunk's update is one product over kTokens: A (stored [token][r]) and B below.
  constexpr int kTokens = (kPrecise ? 4 : 2) * kC;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* s_a = P::tiles(smem);
  bf16* s_b = s_a + kTokens * 64;
  T* k_rows_in = reinterpret_cast<T*>(s_b + kTokens * 64);
  T* k_cols_in = k_rows_in + kC * 64;
  __shared__ float s_g[kC], s_w[kC], s_scale_s[kC], s_scale_k[kC];
  constexpr int kTilesPerSide = D / 64;
  const TileLane tl{int(blockIdx.x / kTilesPerSide) * 64, int(blockIdx.x % kTilesPerSide) * 64, int(threadIdx.x >> 5),
                    int(threadIdx.x & 31)};
  const int64_t bh = blockIdx.y;
  const T *s = static_cast<const T*>(a.s), *x = static_cast<const T*>(a.x), *k = static_cast<const T*>(a.k);

  float acc[8][4];
  load_tile<D>(acc, a.dstate_out ? a.dstate_out + bh * D * D : nullptr, tl);
  // Everything a chunk's step reads from memory is loaded during the previous step (the pass is a chain of steps,
  // and each load waited for would add its latency to every step): the chunk's s and k at the tile's rows, x and k
  // at its columns (A = [−ζ∘S | −½ζW∘K], B = [X ; K]; precise: A = [−ζ∘S | −½ζW∘K | −ζ∘S_lo | −ζ∘S] and
  // B = [X ; K ; X ; X_lo], the lo × lo product left out), its gates, its rows' W and its start state. Its end state is
  // the previous step's start state. s and x wait in registers, the keys in shared memory (cp.async): with all four in
  // f32 registers the precise kernel spilled them as they arrived, which waited for each load at once (Nsight Compute,
  // 2026-11-29: the spill stores were 23% of the stall samples).
  using Pieces = RowPieces<T, 64, kThreads>;
  Pieces s_rows, x_cols;
  ChunkGates gates;
  float w_row = 0.f;  // W of row threadIdx.x (threads < 64)
  auto load_chunk = [&](int n) {
    const ChunkRef c = a.geo.chunk(bh, n, D);
    s_rows.load(s ? s + c.row0 : nullptr, c.row_stride, tl.row0, c.len);
    x_cols.load(x + c.row0, c.row_stride, tl.col0, c.len);
    gates.load(a.gk, c);
    if (threadIdx.x < kC) w_row = a.W[a.geo.rows(bh, n) + threadIdx.x];
  };
  auto load_chunk_keys = [&](int n) {  // once every thread has read the staged keys of the chunk before
    const ChunkRef c = a.geo.chunk(bh, n, D);
    Pieces::load_async(k_rows_in, k + c.row0, c.row_stride, tl.row0, c.len);
    Pieces::load_async(k_cols_in, k + c.row0, c.row_stride, tl.col0, c.len);
    tile::cp_async_commit();
  };
  float h0[8][4], h_end[8][4];  // the states before and after the chunk
  load_tile<D>(h_end, a.states + a.geo.state(bh, a.geo.N, D), tl);
  load_tile<D>(h0, a.states + a.geo.state(bh, a.geo.N - 1, D), tl);
  load_chunk(a.geo.N - 1);
  load_chunk_keys(a.geo.N - 1);
  for (int n = a.geo.N - 1; n >= 0; --n) {
    const ChunkRef c = a.geo.chunk(bh, n, D);
    store_tile_f32<D>(a.dstates + (bh * a.geo.N + n) * D * D, acc, tl);
    float tile_dot = 0.f;  // this tile's part of ⟨Ĥ, H_L⟩
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) tile_dot += acc[nt][e] * h_end[nt][e];
    // h_end is spent: it receives the next chunk's start state, and becomes h0 at the end of the step.
    if (n > 0) load_tile<D>(h_end, a.states + a.geo.state(bh, n - 1, D), tl);
    tile_dot = block_sum(tile_dot);
    if (threadIdx.x == 0) a.hdot[(bh * a.geo.N + n) * kTilesPerSide * kTilesPerSide + blockIdx.x] = tile_dot;

    gates.scan(s_g);
    if (threadIdx.x < kC) s_w[threadIdx.x] = w_row;
    tile::cp_async_wait<0>();  // this chunk's keys (published by the barrier)
    __syncthreads();
    if (threadIdx.x < kC) {
      const int i = threadIdx.x;
      const float zeta = __expf(s_g[i]);
      s_scale_s[i] = -zeta;
      s_scale_k[i] = i < c.len ? -0.5f * zeta * s_w[i] : 0.f;
    }
    const float zeta_last = __expf(s_g[c.len - 1]), zeta0 = __expf(s_g[0]);
    const float half_w0 = 0.5f * zeta0 * zeta0 * s_w[0];
    __syncthreads();
    s_rows.store(s_a, kPrecise ? s_a + 2 * kC * 64 : nullptr, s_scale_s);
    x_cols.store(s_b, kPrecise ? s_b + 3 * kC * 64 : nullptr, nullptr);
    {
      Pieces keys;
      keys.load_staged(k_rows_in);
      keys.store(s_a + kC * 64, nullptr, s_scale_k);
      keys.load_staged(k_cols_in);
      keys.store(s_b + kC * 64, nullptr, nullptr);
    }
    if constexpr (kPrecise) {
      s_rows.store(s_a + 3 * kC * 64, nullptr, s_scale_s);
      x_cols.store(s_b + 2 * kC * 64, nullptr, nullptr);
    }
    if (n > 0) load_chunk(n - 1);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[nt][e] = zeta_last * acc[nt][e] - half_w0 * h0[nt][e];
        const float next_h0 = h_end[nt][e];
        h_end[nt][e] = h0[nt][e];
        h0[nt][e] = next_h0;
      }
    P::sync();
    if (n > 0) load_chunk_keys(n - 1);
    P::template atb<kTokens, kTokens, 64, kTokens, 64>(acc, s_a, s_b, 16 * tl.warp, 0, tl.lane);
    __syncthreads();  // the next chunk restages the tiles
  }
  if (a.dstate_in) store_tile_f32<D>(a.dstate_in + bh * D * D, acc, tl);
}

}  // namespace

void launch_chunk_states(const ChebyshevDims& d, DType dtype, const void* k, const float* gk, const float* state_in,
                         float* states, float* state_out) {
  const StatesArgs a{k, gk, state_in, states, state_out, geom_of(d)};
  const dim3 grid(unsigned(state_tiles(d)), unsigned(d.heads_total()));
  with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_dim(d.dim, [&](auto dim) {
      cuda::launch_dependent(chunk_states_kernel<decltype(dim)::value, T>, grid, kThreads, 0, a);
    });
  });
}

void launch_state_gradients(const ChebyshevDims& d, DType dtype, const void* s, const void* x, const void* k,
                            const float* gk, const float* W, const float* states, const float* dstate_out,
                            float* dstates, float* hdot, float* dstate_in) {
  const StateGradArgs a{s, x, k, gk, W, states, dstate_out, dstates, hdot, dstate_in, geom_of(d)};
  const dim3 grid(unsigned(state_tiles(d)), unsigned(d.heads_total()));
  with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_dim(d.dim, [&](auto dim) {
      auto launch = [&](auto products) {
        using Products = decltype(products);
        constexpr auto kernel = state_gradients_kernel<decltype(dim)::value, T, Products>;
        constexpr int kBytes = state_gradients_smem_bytes<T>() + Products::kAlignmentSlack;
        allow_dynamic_smem<kernel>(kBytes);
        cuda::launch_dependent(kernel, grid, kThreads, kBytes, a);
      };
      if (wgmma_available())
        launch(tile::GroupProducts{});
      else
        launch(tile::WarpProducts{});
    });
  });
}

}  // namespace primer::ops::cuda_ops::cheb
