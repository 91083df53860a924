// Warp-level tensor-core building blocks of every mma.sync kernel (sm_80+: flash attention, GLA, the gated delta rule,
// the Chebyshev solve): cp.async tile copies into XOR-swizzled shared memory, ldmatrix fragment loads and mma.sync
// m16n8k16 (bf16 in, fp32 accumulate). The products of whole stored tiles are in warp_mma.cuh.
//
// Fragment layout of mma m16n8k16, with g = lane / 4 and t = lane % 4:
//   A (16x16): a0 (row g, cols 2t..2t+1), a1 (row g+8, same cols), a2 (row g, cols 2t+8..), a3 (row g+8, cols 2t+8..)
//   B (16x8):  b0 (rows 2t..2t+1, col g), b1 (rows 2t+8.., col g)
//   C (16x8):  c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8, same cols)
// Two accumulator tiles side by side (16x16 of C) are exactly one A fragment once packed to bf16, which is how
// probabilities go from one product into the next without touching shared memory.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace primer::ops::cuda_ops::tile {

using bf16 = __nv_bfloat16;

// Element offset of (row, col) in a tile with kCols bf16 per row, stored in 16-byte chunks whose index is XORed
// with row % 8: the 8 rows an ldmatrix reads at one column fall in 8 different bank groups. Rows of 32 (four
// chunks, two rows per 128-byte line) XOR with (row / 2) % 4 instead: row parity picks the line's half, and the
// four row pairs take the four chunks.
template <int kCols> __device__ __forceinline__ int swizzle(int row, int col) {
  static_assert(kCols == 32 || kCols % 64 == 0, "swizzled tiles are 32 or a multiple of 64 columns wide");
  if constexpr (kCols == 32) return row * kCols + ((((col >> 3) ^ ((row >> 1) & 3)) << 3) | (col & 7));
  return row * kCols + ((((col >> 3) ^ (row & 7)) << 3) | (col & 7));
}

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// A 32-bit store at a shared-memory address (smem_address), for kernels that compute addresses themselves (e.g. a
// swizzle as one XOR per 16-byte column); a constant added to the address becomes the store's immediate offset.
__device__ __forceinline__ void st_shared_u32(uint32_t address, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(v) : "memory");
}

// 16-byte asynchronous copy; when !valid the destination is zero-filled and nothing is read.
__device__ __forceinline__ void cp_async_16(void* smem, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(global),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// A tile's 16-byte chunks spread over kThreads threads, in an order the compiler can unroll: each thread keeps one
// column chunk and steps down the rows by kRowStep (where the threads cover whole rows). With a step that is a
// multiple of 8 (256 threads on rows of up to 256 bf16) a swizzled tile's row % 8, and with it the XOR, stays the
// thread's own, and every step's shared address is an immediate offset from the first. f(row, col) for each of this
// thread's chunks with row < kRows.
template <int kRows, int kCols, int kThreads, class F> __device__ __forceinline__ void for_each_chunk(F&& f) {
  constexpr int kChunksPerRow = kCols / 8;
  if constexpr (kThreads % kChunksPerRow == 0) {
    constexpr int kRowStep = kThreads / kChunksPerRow;
    const int row0 = int(threadIdx.x) / kChunksPerRow, col = (int(threadIdx.x) % kChunksPerRow) * 8;
#pragma unroll
    for (int i = 0; i < (kRows + kRowStep - 1) / kRowStep; ++i)
      if (kRows % kRowStep == 0 || row0 + i * kRowStep < kRows) f(row0 + i * kRowStep, col);
  } else {
    for (int c = int(threadIdx.x); c < kRows * kChunksPerRow; c += kThreads)
      f(c / kChunksPerRow, (c % kChunksPerRow) * 8);
  }
}

// Copies rows [0, kRows) of a [*, kCols] bf16 tile whose rows are `row_stride` elements apart into swizzled shared
// memory; rows at or beyond `valid_rows` are zero-filled (so padded keys and values can never inject NaN).
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_tile_async(bf16* smem, const bf16* global, int64_t row_stride, int valid_rows) {
  for_each_chunk<kRows, kCols, kThreads>([&](int row, int col) {
    const bool valid = row < valid_rows;
    cp_async_16(smem + swizzle<kCols>(row, col), valid ? global + row * row_stride + col : global, valid);
  });
}

// Flips the sign of the eight bf16 in a 16-byte chunk.
__device__ __forceinline__ void negate_bf16x8(uint4& v) {
  v.x ^= 0x80008000u, v.y ^= 0x80008000u, v.z ^= 0x80008000u, v.w ^= 0x80008000u;
}

// The reverse of load_tile_async: writes rows [0, min(kRows, rows)) of a swizzled [kRows][kCols] bf16 tile in shared
// memory to global rows `row_stride` elements apart, 16 bytes a thread at a time (whole sectors, a few instructions a
// thread where a fragment's pairs would take a 4-byte store each). kNegate flips every element's sign on the way.
template <int kRows, int kCols, int kThreads, bool kNegate = false>
__device__ __forceinline__ void store_tile_rows(bf16* global, int64_t row_stride, const bf16* smem, int rows = kRows) {
  for_each_chunk<kRows, kCols, kThreads>([&](int row, int col) {
    if (row >= rows) return;
    uint4 v = *reinterpret_cast<const uint4*>(smem + swizzle<kCols>(row, col));
    if constexpr (kNegate) negate_bf16x8(v);
    *reinterpret_cast<uint4*>(global + row * row_stride + col) = v;
  });
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

// A fragment of the 16x16 block at (m0, k0) of a row-major [m][k] tile.
template <int kCols>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int m0, int k0, int lane) {
  ldmatrix_x4(a, tile + swizzle<kCols>(m0 + (lane & 15), k0 + (lane >> 4) * 8));
}
// A fragment of the 16x16 block at (m0, k0) of A when the tile stores A transposed, as [k][m].
template <int kCols>
__device__ __forceinline__ void load_a_transposed(uint32_t (&a)[4], const bf16* tile, int m0, int k0, int lane) {
  const int quad = lane >> 3;
  ldmatrix_x4_trans(a, tile + swizzle<kCols>(k0 + (quad >> 1) * 8 + (lane & 7), m0 + (quad & 1) * 8));
}
// B fragments of two n-tiles (n0 and n0 + 8; k0..k0+15) from a tile stored as [n][k] (B "column-major"):
// {b[0], b[1]} for n0 and {b[2], b[3]} for n0 + 8.
template <int kCols>
__device__ __forceinline__ void load_b_pair_nk(uint32_t (&b)[4], const bf16* tile, int n0, int k0, int lane) {
  ldmatrix_x4(b, tile + swizzle<kCols>(n0 + (lane >> 4) * 8 + (lane & 7), k0 + ((lane >> 3) & 1) * 8));
}
// The same two n-tiles from a tile stored as [k][n] (B row-major).
template <int kCols>
__device__ __forceinline__ void load_b_pair_kn(uint32_t (&b)[4], const bf16* tile, int n0, int k0, int lane) {
  ldmatrix_x4_trans(b, tile + swizzle<kCols>(k0 + (lane & 15), n0 + (lane >> 4) * 8));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (the lower column) in the low half
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The rounding residuals v − bf16(v) of v0, v1, packed as a bf16 pair: with pack_bf16(v0, v1) the pair's hi + lo,
// ~16 significant bits, for products whose operand rounding would otherwise be amplified.
__device__ __forceinline__ uint32_t residual_bf16(float v0, float v1) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
  return pack_bf16(v0 - __low2float(h), v1 - __high2float(h));
}

// v0, v1 as a bf16 pair at hi and their rounding residuals at lo (residual_bf16).
__device__ __forceinline__ void store_pair_split(bf16* hi, bf16* lo, float v0, float v1) {
  *reinterpret_cast<uint32_t*>(hi) = pack_bf16(v0, v1);
  *reinterpret_cast<uint32_t*>(lo) = residual_bf16(v0, v1);
}

// Transposes 4 x 4 words across the four lanes of a quad (lanes 4g..4g+3): afterwards lane t holds in v[k] what lane
// k held in v[t]. Word j of an accumulator row packed as bf16 pairs is columns 8j + 2t, 8j + 2t + 1 on lane t, so
// after the transpose lane t holds 8 consecutive columns 8t..8t+7: one 16-byte store instead of four 4-byte ones.
// Two exchanges, one per bit of the lane index (each swaps that bit of the lane with the same bit of the word).
__device__ __forceinline__ void quad_transpose(uint32_t (&v)[4]) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int bit = 1; bit <= 2; bit <<= 1) {
    const bool set = t & bit;
#pragma unroll
    for (int other = 0; other < 4; ++other) {
      if (other & bit) continue;  // the pair (other, other | bit): send the word whose bit differs from the lane's
      uint32_t& keep_low = v[other];
      uint32_t& keep_high = v[other | bit];
      const uint32_t sent = __shfl_xor_sync(0xffffffffu, set ? keep_low : keep_high, bit);
      if (set)
        keep_low = sent;
      else
        keep_high = sent;
    }
  }
}

// Stores one row of kTiles 8-column accumulator tiles as bf16 at row[0, 8 kTiles): pair(j) is this lane's packed pair
// of tile j (columns 8j + 2t, 8j + 2t + 1). Groups of four tiles are transposed across the quad first, so that a
// warp's store writes 64 contiguous bytes of each of its 8 rows, not 16 (a fourth of the store instructions, whole
// 32-byte sectors); kTiles not a multiple of 4 keeps the pairs' own 4-byte stores. Every lane of the warp must call
// it (the transpose shuffles across the warp); a lane whose row is not to be written passes store = false.
template <int kTiles, class PairFn>
__device__ __forceinline__ void store_row_pairs(bf16* row, PairFn pair, bool store = true) {
  const int t = threadIdx.x & 3;
  if constexpr (kTiles % 4 == 0) {
#pragma unroll
    for (int j0 = 0; j0 < kTiles; j0 += 4) {
      uint32_t w[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) w[j] = pair(j0 + j);
      quad_transpose(w);
      if (store) *reinterpret_cast<uint4*>(row + 8 * (j0 + t)) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  } else if (store) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) *reinterpret_cast<uint32_t*>(row + 8 * j + 2 * t) = pair(j);
  }
}

// The A fragment of k-step `kk` (columns 16kk..16kk+15) of a row of 8-column accumulator tiles c[].
template <int kTiles>
__device__ __forceinline__ void accumulators_to_a(uint32_t (&a)[4], const float (&c)[kTiles][4], int kk) {
  a[0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
  a[1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

}  // namespace primer::ops::cuda_ops::tile
