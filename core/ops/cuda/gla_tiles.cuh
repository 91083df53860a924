// Device building blocks of the chunked GLA kernels (gla_scan.cu, gla_forward.cu, gla_backward.cu): 64-token chunk
// tiles staged from global memory through registers into swizzled bf16 shared memory (converting f32 inputs and
// optionally scaling each row on the way), the chunk's cumulative log decay, and mma accumulator bookkeeping.
// The tensor-core fragments and their loads are those of attention_mma.cuh.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "core/ops/cuda/attention_mma.cuh"

namespace primer::ops::cuda_ops::gla {

using attn::bf16;
constexpr int kChunk = 64;    // tokens per chunk (kGlaChunk)
constexpr int kThreads = 256;  // every GLA kernel runs 8 warps

// A kRows × kCols tile of T (bf16 or f32) held in registers, 8 elements (one 16-byte bf16 chunk of the swizzled
// shared tile) per unit, so that a load can be issued early and its latency overlapped with other work.
template <class T, int kRows, int kCols>
struct TileRegs {
  static constexpr int kUnitsPerRow = kCols / 8;
  static constexpr int kUnits = kRows * kUnitsPerRow / kThreads;
  static constexpr int kWords = int(sizeof(T)) / 2;  // uint4 words per unit: 1 for bf16, 2 for f32
  static_assert(kRows * kUnitsPerRow % kThreads == 0, "tile must split evenly over the block");
  uint4 raw[kUnits][kWords];

  __device__ __forceinline__ static int row_of(int u) { return (threadIdx.x + u * kThreads) / kUnitsPerRow; }
  __device__ __forceinline__ static int col_of(int u) { return (threadIdx.x + u * kThreads) % kUnitsPerRow * 8; }

  // Rows [0, valid_rows) from `base` (row r at base + r·row_stride, 16-byte aligned); later rows become zeros.
  __device__ __forceinline__ void fetch(const T* base, int64_t row_stride, int valid_rows) {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int row = row_of(u);
      const uint4* src = reinterpret_cast<const uint4*>(base + row * row_stride + col_of(u));
#pragma unroll
      for (int w = 0; w < kWords; ++w) raw[u][w] = row < valid_rows ? __ldg(src + w) : make_uint4(0, 0, 0, 0);
    }
  }

  // Writes the tile to swizzled shared memory as bf16, each row multiplied by row_scale(row) (in fp32).
  template <class Scale>
  __device__ __forceinline__ void store(bf16* smem, Scale row_scale) const {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int row = row_of(u);
      const float s = row_scale(row);
      float x[8];
      unpack(raw[u], x);
      uint4 packed;
      packed.x = attn::pack_bf16(x[0] * s, x[1] * s);
      packed.y = attn::pack_bf16(x[2] * s, x[3] * s);
      packed.z = attn::pack_bf16(x[4] * s, x[5] * s);
      packed.w = attn::pack_bf16(x[6] * s, x[7] * s);
      *reinterpret_cast<uint4*>(smem + attn::swizzle<kCols>(row, col_of(u))) = packed;
    }
  }

  // Writes the tile unscaled (bf16 data is copied as is).
  __device__ __forceinline__ void store(bf16* smem) const {
    if constexpr (std::is_same_v<T, bf16>) {
#pragma unroll
      for (int u = 0; u < kUnits; ++u)
        *reinterpret_cast<uint4*>(smem + attn::swizzle<kCols>(row_of(u), col_of(u))) = raw[u][0];
    } else {
      store(smem, [](int) { return 1.f; });
    }
  }

 private:
  __device__ __forceinline__ static void unpack(const uint4 (&w)[kWords], float (&x)[8]) {
    if constexpr (std::is_same_v<T, bf16>) {
      const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&w[0]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(p[i]);
        x[2 * i] = f.x;
        x[2 * i + 1] = f.y;
      }
    } else {
      const float* p = reinterpret_cast<const float*>(&w[0]);
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = p[i];
    }
  }
};

// The chunk's log decays (zero beyond `valid`) as an inclusive cumulative sum G[0..63], computed by one warp from
// the two gates each lane holds (rows lane and lane + 32).
__device__ __forceinline__ void chunk_cumsum_warp(float g_lo, float g_hi, float* G) {
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
  G[lane] = g_lo;
  G[lane + 32] = g_hi;
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
__device__ __forceinline__ void store_pair(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }

// Both bf16 values of an aligned pair in shared memory, as floats.
__device__ __forceinline__ float2 load_pair(const bf16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}
// Sum over the 4 lanes of a quad (the threads sharing an accumulator row).
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace primer::ops::cuda_ops::gla
