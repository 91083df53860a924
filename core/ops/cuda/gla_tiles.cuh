// Device building blocks of the chunked GLA kernels (gla_scan.cu, gla_forward.cu, gla_backward.cu): the chunk's
// cumulative log decay, mma accumulator bookkeeping and fragment scaling. Tiles move into swizzled shared memory by
// cp.async, and the tensor-core fragments and their loads are those of tile/mma.cuh.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "core/ops/cuda/tile/mma.cuh"

namespace primer::ops::cuda_ops::gla {

using tile::bf16;
constexpr int kChunk = 64;     // tokens per chunk (kGlaChunk)
constexpr int kThreads = 256;  // every GLA kernel runs 8 warps

// The chunk's log decays (zero beyond the valid rows) turned in place into the inclusive cumulative sum G over the
// chunk's 64 rows, by one warp whose lanes hold rows lane (lo) and lane + 32 (hi).
__device__ __forceinline__ void chunk_cumsum_warp(float& g_lo, float& g_hi) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const float lo = __shfl_up_sync(0xffffffffu, g_lo, off), hi = __shfl_up_sync(0xffffffffu, g_hi, off);
    if (lane >= off) {
      g_lo += lo;
      g_hi += hi;
    }
  }
  g_hi += __shfl_sync(0xffffffffu, g_lo, 31);
}
// The same, written to G[0..63].
__device__ __forceinline__ void chunk_cumsum_warp(float g_lo, float g_hi, float* G) {
  chunk_cumsum_warp(g_lo, g_hi);
  G[threadIdx.x % 32] = g_lo;
  G[threadIdx.x % 32 + 32] = g_hi;
}

// The gates of rows lane and lane + 32 of a chunk starting at g (row stride `heads`), zero beyond `valid`.
__device__ __forceinline__ void load_chunk_gates(const float* g, int heads, int valid, float& g_lo, float& g_hi) {
  const int lane = threadIdx.x % 32;
  g_lo = lane < valid ? __ldg(g + int64_t(lane) * heads) : 0.f;
  g_hi = lane + 32 < valid ? __ldg(g + int64_t(lane + 32) * heads) : 0.f;
}

// Row and column (within the warp's 16-row, kTiles·8-column block) of accumulator element e of n-tile j.
__device__ __forceinline__ int frag_row(int e) { return (threadIdx.x % 32) / 4 + 8 * (e >> 1); }
__device__ __forceinline__ int frag_col(int j, int e) { return 8 * j + 2 * (threadIdx.x % 4) + (e & 1); }

// Stores two adjacent columns of a row (the pair an accumulator holds) as T.
__device__ __forceinline__ void store_pair(bf16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store_pair(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}

// Stores fragment row rr (0: row g, 1: row g + 8) of this warp's kTiles accumulator tiles at row[0, 8 kTiles) as T,
// where `store` (rows past the sequence's end are not): bf16 through tile::store_row_pairs (16 bytes a lane; every
// lane of the warp calls it), f32 as each lane's pairs (already whole sectors).
template <int kTiles>
__device__ __forceinline__ void store_row(bf16* row, const float (&acc)[kTiles][4], int rr, bool store) {
  tile::store_row_pairs<kTiles>(
      row, [&](int j) { return tile::pack_bf16(acc[j][2 * rr], acc[j][2 * rr + 1]); }, store);
}
template <int kTiles>
__device__ __forceinline__ void store_row(float* row, const float (&acc)[kTiles][4], int rr, bool store) {
  if (!store) return;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) store_pair(row + frag_col(j, 0), acc[j][2 * rr], acc[j][2 * rr + 1]);
}

// Both bf16 values of an aligned pair in shared memory, as floats.
__device__ __forceinline__ float2 load_pair(const bf16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// A packed bf16 pair (lower column in the low half, as mma fragments hold them) times (lo, hi), rounded back.
__device__ __forceinline__ uint32_t scale_pair(uint32_t packed, float lo, float hi) {
  const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed));
  return tile::pack_bf16(f.x * lo, f.y * hi);
}

}  // namespace primer::ops::cuda_ops::gla
