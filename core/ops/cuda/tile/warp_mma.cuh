// Products of whole stored tiles for the chunked kernels (sm_80+): every operand is a bf16 tile in XOR-swizzled shared
// memory (tile/mma.cuh's layout, rows of kCols ≥ 64 elements), read through one of four views so that any product
// op(A)·op(B) of stored tiles is one call; the CTA's warps split the output into 16-row blocks and keep their part
// in fp32 registers. Accumulator element e of n-tile j sits at row m0 + g + 8·(e / 2), column n0 + 8j + 2t + e % 2
// (g = lane / 4, t = lane % 4), which the visitors below hand to epilogues.
#pragma once
#include "core/ops/cuda/tile/block_reduce.cuh"
#include "core/ops/cuda/tile/mma.cuh"

namespace primer::ops::cuda_ops::tile {

// A (m × k) stored row-major, [m][k].
template <int kCols> struct MatA {
  const bf16* tile;
  __device__ __forceinline__ void load(uint32_t (&a)[4], int m0, int k0, int lane) const {
    load_a<kCols>(a, tile, m0, k0, lane);
  }
};
// A (m × k) given by Aᵀ stored row-major, [k][m].
template <int kCols> struct MatAT {
  const bf16* tile;
  __device__ __forceinline__ void load(uint32_t (&a)[4], int m0, int k0, int lane) const {
    load_a_transposed<kCols>(a, tile, m0, k0, lane);
  }
};
// B (k × n) stored row-major, [k][n].
template <int kCols> struct MatB {
  const bf16* tile;
  __device__ __forceinline__ void load_pair(uint32_t (&b)[4], int n0, int k0, int lane) const {
    load_b_pair_kn<kCols>(b, tile, n0, k0, lane);
  }
};
// B (k × n) given by Bᵀ stored row-major, [n][k].
template <int kCols> struct MatBT {
  const bf16* tile;
  __device__ __forceinline__ void load_pair(uint32_t (&b)[4], int n0, int k0, int lane) const {
    load_b_pair_nk<kCols>(b, tile, n0, k0, lane);
  }
};

// How kWarps warps split an M × N output: kWarpsM row blocks of 16 times kWarpsN column blocks of kCols.
template <int M, int N, int kWarps> struct WarpGrid {
  static constexpr int kWarpsM = M / 16 < kWarps ? M / 16 : kWarps;
  static constexpr int kWarpsN = kWarps / kWarpsM;
  static constexpr int kCols = N / kWarpsN;
  static constexpr int kTiles = kCols / 8;  // n-tiles of 8 per warp
  static_assert(M == 16 * kWarpsM && kWarps == kWarpsM * kWarpsN && N == kCols * kWarpsN && kTiles % 2 == 0,
                "the output must split into one 16-row block and an even number of 8-column tiles per warp");
  static __device__ __forceinline__ int m0(int warp) { return (warp % kWarpsM) * 16; }
  static __device__ __forceinline__ int n0(int warp) { return (warp / kWarpsM) * kCols; }
};

// acc (16 × 8·kTiles at (m0, n0)) += op(A)[m0.., k] · op(B)[k, n0..] over the 16-wide k-blocks [kk_begin, kk_end)
// of [0, kDepth) (a causal product skips the blocks a triangle leaves empty).
template <int kDepth, int kTiles, class A, class B>
__device__ __forceinline__ void warp_mma(float (&acc)[kTiles][4], const A& a, const B& b, int m0, int n0, int lane,
                                         int kk_begin = 0, int kk_end = kDepth / 16) {
#pragma unroll
  for (int kk = 0; kk < kDepth / 16; ++kk) {
    if (kk < kk_begin || kk >= kk_end) continue;
    uint32_t af[4];
    a.load(af, m0, kk * 16, lane);
#pragma unroll
    for (int np = 0; np < kTiles / 2; ++np) {
      uint32_t bf[4];
      b.load_pair(bf, n0 + np * 16, kk * 16, lane);
      mma_bf16(acc[2 * np], af, bf[0], bf[1]);
      mma_bf16(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

// The products by how their operands are stored (kACols, kBCols: the tiles' row widths): acc += A·B with A [m][k]
// and B [k][n]; A·Bᵀ with B stored [n][k]; Aᵀ·B with A stored [k][m].
template <int kDepth, int kACols, int kBCols, int kTiles>
__device__ __forceinline__ void mma_AB(float (&acc)[kTiles][4], const bf16* A, const bf16* B, int m0, int n0, int lane,
                                       int kk_begin = 0, int kk_end = kDepth / 16) {
  warp_mma<kDepth>(acc, MatA<kACols>{A}, MatB<kBCols>{B}, m0, n0, lane, kk_begin, kk_end);
}
template <int kDepth, int kACols, int kBCols, int kTiles>
__device__ __forceinline__ void mma_ABt(float (&acc)[kTiles][4], const bf16* A, const bf16* Bt, int m0, int n0,
                                        int lane, int kk_begin = 0, int kk_end = kDepth / 16) {
  warp_mma<kDepth>(acc, MatA<kACols>{A}, MatBT<kBCols>{Bt}, m0, n0, lane, kk_begin, kk_end);
}
template <int kDepth, int kACols, int kBCols, int kTiles>
__device__ __forceinline__ void mma_AtB(float (&acc)[kTiles][4], const bf16* At, const bf16* B, int m0, int n0,
                                        int lane, int kk_begin = 0, int kk_end = kDepth / 16) {
  warp_mma<kDepth>(acc, MatAT<kACols>{At}, MatB<kBCols>{B}, m0, n0, lane, kk_begin, kk_end);
}

template <int kTiles> __device__ __forceinline__ void zero(float (&acc)[kTiles][4]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
}

// f(row, col, value&) for every accumulator element.
template <int kTiles, class F>
__device__ __forceinline__ void for_each(float (&acc)[kTiles][4], int m0, int n0, int lane, F&& f) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) f(m0 + g + 8 * (e >> 1), n0 + 8 * j + 2 * t + (e & 1), acc[j][e]);
}

// Accumulator element `index` = 4j + e of a lane (n-tile j, element e): its (row, col), and a store to it. A rolled
// loop over a lane's elements (for code that is rare and long, kept small) indexes acc through these: a runtime index
// into acc itself would move the accumulator to local memory.
__device__ __forceinline__ int2 element_at(int index, int m0, int n0, int lane) {
  const int j = index / 4, e = index % 4;
  return make_int2(m0 + lane / 4 + 8 * (e >> 1), n0 + 8 * j + 2 * (lane % 4) + (e & 1));
}
template <int kTiles> __device__ __forceinline__ void set_element(float (&acc)[kTiles][4], int index, float v) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (4 * j + e == index) acc[j][e] = v;
}

// f(row, col, v0, v1) for every pair of horizontally adjacent elements (col even): what one 4-byte bf16x2 store
// or one float2 store writes.
template <int kTiles, class F>
__device__ __forceinline__ void for_each_pair(const float (&acc)[kTiles][4], int m0, int n0, int lane, F&& f) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) f(m0 + g + 8 * h, n0 + 8 * j + 2 * t, acc[j][2 * h], acc[j][2 * h + 1]);
}

// Stores the accumulator as bf16 into a swizzled [*][kCols] tile.
template <int kCols, int kTiles>
__device__ __forceinline__ void store_tile(bf16* tile, const float (&acc)[kTiles][4], int m0, int n0, int lane) {
  for_each_pair(acc, m0, n0, lane, [&](int r, int c, float v0, float v1) {
    *reinterpret_cast<uint32_t*>(tile + swizzle<kCols>(r, c)) = pack_bf16(v0, v1);
  });
}

// Stores the accumulator as a pair of bf16 tiles, hi = bf16(v) and lo = bf16(v − hi): hi + lo carries ~16
// significant bits, for products whose operand rounding would otherwise be amplified (a product with hi and one
// with lo replace one with v).
template <int kCols, int kTiles> __device__ __forceinline__ void store_tile_split(bf16* hi, bf16* lo,
                                                                                  const float (&acc)[kTiles][4], int m0,
                                                                                  int n0, int lane) {
  for_each_pair(acc, m0, n0, lane, [&](int r, int c, float v0, float v1) {
    store_pair_split(hi + swizzle<kCols>(r, c), lo + swizzle<kCols>(r, c), v0, v1);
  });
}

// Sum over the 4 lanes that share an accumulator row (lanes 4g .. 4g + 3).
__device__ __forceinline__ float row_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
// Max over the 4 lanes that share an accumulator row (same g, every t).
__device__ __forceinline__ float row_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
// Sum over the 8 lanes that share an accumulator column (same t, every g).
__device__ __forceinline__ float column_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  v += __shfl_xor_sync(0xffffffffu, v, 8);
  return v + __shfl_xor_sync(0xffffffffu, v, 16);
}

// v *= f(row) for every accumulator element, f evaluated once for each of the lane's two rows (m0 + g, m0 + g + 8).
template <int kTiles, class F>
__device__ __forceinline__ void scale_rows(float (&acc)[kTiles][4], int m0, int lane, F&& f) {
  const float lo = f(m0 + lane / 4), hi = f(m0 + lane / 4 + 8);
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    acc[j][0] *= lo;
    acc[j][1] *= lo;
    acc[j][2] *= hi;
    acc[j][3] *= hi;
  }
}

// Elements (row, col) and (row, col + 1) of a swizzled bf16 tile (col even).
template <int kCols> __device__ __forceinline__ float2 tile_pair(const bf16* tile, int row, int col) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(tile + swizzle<kCols>(row, col)));
}

// Σ over this warp's columns of f(row, col, v0, v1) (a pair of horizontally adjacent elements) for the lane's two
// rows, {m0 + g, m0 + g + 8}; every lane of a row gets its total.
template <int kTiles, class F>
__device__ __forceinline__ float2 row_sums(const float (&acc)[kTiles][4], int m0, int n0, int lane, F&& f) {
  const int g = lane / 4, t = lane % 4;
  float lo = 0.f, hi = 0.f;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int c = n0 + 8 * j + 2 * t;
    lo += f(m0 + g, c, acc[j][0], acc[j][1]);
    hi += f(m0 + g + 8, c, acc[j][2], acc[j][3]);
  }
  return make_float2(row_sum(lo), row_sum(hi));
}

// dst[row] += factor(row) · sums for the lane's two rows, written by one lane per row: with one warp per (row block,
// column block) and one array per column block, sums collected this way are deterministic.
template <class F> __device__ __forceinline__ void add_rows(float* dst, float2 sums, int m0, int lane, F&& factor) {
  if (lane % 4 == 0) {
    const int r = m0 + lane / 4;
    dst[r] += factor(r) * sums.x;
    dst[r + 8] += factor(r + 8) * sums.y;
  }
}

// dst[col] += Σ over this warp's 16 rows of f(row, col, value), for the warp's columns (one lane per column).
template <int kTiles, class F> __device__ __forceinline__ void accumulate_columns(const float (&acc)[kTiles][4], int m0,
                                                                                  int n0, int lane, float* dst, F&& f) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int c = n0 + 8 * j + 2 * t + p;
      const float x = column_sum(f(m0 + g, c, acc[j][p]) + f(m0 + g + 8, c, acc[j][2 + p]));
      if (g == 0) dst[c] += x;
    }
}

}  // namespace primer::ops::cuda_ops::tile
