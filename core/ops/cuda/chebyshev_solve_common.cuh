// Device pieces the chunked Chebyshev-solve kernels share: where a chunk's rows live, its cumulative log-decays,
// affine scans over a chunk's 64 rows, staging rows into swizzled bf16 tiles, and warp-tile products on mma.sync
// (bf16 operands, fp32 accumulation; the fragment layouts are those of tile/mma.cuh).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/ops/chebyshev_solve_dims.h"
#include "core/ops/cuda/tile/mma.cuh"
#include "core/ops/cuda/tile/warp_mma.cuh"
#include "core/ops/cuda/tile/vector_io.cuh"

namespace primer::ops::cuda_ops::cheb {

using tile::bf16;
constexpr int kC = int(ChebyshevDims::kChunk);  // tokens per chunk: 64

// One chunk of one (batch, head) in the [B, T, H, D] and [B, T, H] buffers.
struct ChunkRef {
  int64_t bh, n;
  int64_t row0;        // element offset of the chunk's first token in a [B, T, H, D] buffer
  int64_t gate0;       // offset of its first token in a [B, T, H] buffer
  int64_t row_stride;  // H·D elements between tokens (and H between gates)
  int64_t gate_stride;
  int len;  // valid tokens, 1..64
};

// Sizes the kernels need, in device-friendly types.
struct Geom {
  int64_t T, H;
  int N;  // chunks per sequence
  __device__ __forceinline__ ChunkRef chunk(int64_t bh, int64_t n, int D) const {
    const int64_t b = bh / H, h = bh % H, t0 = n * kC;
    const int64_t len = T - t0 < kC ? T - t0 : kC;
    return {bh, n, ((b * T + t0) * H + h) * D, (b * T + t0) * H + h, H * D, H, int(len)};
  }
  // Chunk-start state n (n = N: the state after the last token) of head bh in the [BH][N+1][D][D] workspace.
  __device__ __forceinline__ int64_t state(int64_t bh, int64_t n, int D) const { return (bh * (N + 1) + n) * D * D; }
  // Per-chunk-row scalars in a [BH][N][64] workspace.
  __device__ __forceinline__ int64_t rows(int64_t bh, int64_t n) const { return (bh * N + n) * kC; }
};

inline Geom geom_of(const ChebyshevDims& d) { return {d.time, d.heads, int(d.chunks())}; }

// A chunk's per-token log-decays as warp 0 holds them (tokens 2·lane and 2·lane + 1; 0 past len or without gk):
// load() early, so that a sequential pass over chunks reads the next chunk's during the current one, and scan()
// into sG[c] = G_c = Σ_{i≤c} gk_i (flat past len) when needed. Both do nothing outside warp 0; the caller
// synchronises before reading sG.
struct ChunkGates {
  float v0 = 0.f, v1 = 0.f;
  __device__ __forceinline__ void load(const float* gk, const ChunkRef& c) {
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x;
    v0 = gk && 2 * lane < c.len ? gk[c.gate0 + 2 * lane * c.gate_stride] : 0.f;
    v1 = gk && 2 * lane + 1 < c.len ? gk[c.gate0 + (2 * lane + 1) * c.gate_stride] : 0.f;
  }
  __device__ __forceinline__ void scan(float* sG) const {
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x;
    float s = v0 + v1;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, s, off);
      if (lane >= off) s += y;
    }
    sG[2 * lane] = s - v1;
    sG[2 * lane + 1] = s;
  }
};

__device__ __forceinline__ void chunk_log_decays(float* sG, const float* gk, const ChunkRef& c) {
  ChunkGates gates;
  gates.load(gk, c);
  gates.scan(sG);
}

// One warp, rows c = 2·lane and 2·lane + 1: y_c = a_c·y_{c−1} + b_c from y_{−1} = 0, as a log-depth scan of the
// affine maps (their composition is associative).
__device__ __forceinline__ void warp_affine_scan(float a0, float b0, float a1, float b1, float& y0, float& y1) {
  const int lane = threadIdx.x & 31;
  float A = a1 * a0, B = a1 * b0 + b1;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float Ap = __shfl_up_sync(0xffffffffu, A, off), Bp = __shfl_up_sync(0xffffffffu, B, off);
    if (lane >= off) {
      B = A * Bp + B;
      A = A * Ap;
    }
  }
  float prev = __shfl_up_sync(0xffffffffu, B, 1);
  if (lane == 0) prev = 0.f;
  y0 = a0 * prev + b0;
  y1 = B;
}

// The power of two 2^(top − e) that brings m = f·2^e (f in [0.5, 1), m ≥ 0) into [2^(top−1), 2^top); 1 for m = 0. An
// exact scale, for keeping fp16 operands in range.
__device__ __forceinline__ float pow2_scale_into(float m, int top) {
  if (m == 0.f) return 1.f;
  int e;
  frexpf(m, &e);
  return ldexpf(1.f, top - e);
}

// A parameter type that takes no part in deduction (std::type_identity_t, which the kernels' C++17 lacks): lo = nullptr
// then takes hi's type.
template <class T> struct NotDeducedOf { using type = T; };
template <class T> using NotDeduced = typename NotDeducedOf<T>::type;

// Two floats rounded to a pair of 16-bit tensor-core operands (Op: bf16, or fp16 for the iteration's fp16 mode) in
// one word, the first in the low half; and back to floats.
template <class Op> __device__ __forceinline__ uint32_t pack_pair(float a, float b) {
  if constexpr (std::is_same_v<Op, __half>) {
    const __half2 p = __floats2half2_rn(a, b);
    return reinterpret_cast<const uint32_t&>(p);
  } else {
    return tile::pack_bf16(a, b);
  }
}
template <class Op> __device__ __forceinline__ float2 unpack_pair(uint32_t w) {
  if constexpr (std::is_same_v<Op, __half>)
    return __half22float2(reinterpret_cast<const __half2&>(w));
  else
    return __bfloat1622float2(reinterpret_cast<const __nv_bfloat162&>(w));
}

// Eight floats as Op at `offset` of tile hi and, if lo is non-null, their rounding residuals v − Op(v) at the same
// offset of lo: a bf16 hi + lo carries ~16 significant bits.
template <class Op>
__device__ __forceinline__ void store_split(Op* hi, NotDeduced<Op>* lo, int offset, const float (&v)[8]) {
  uint4 h, l;
  uint32_t* hw = reinterpret_cast<uint32_t*>(&h);
  uint32_t* lw = reinterpret_cast<uint32_t*>(&l);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    hw[e] = pack_pair<Op>(v[2 * e], v[2 * e + 1]);
    const float2 r = unpack_pair<Op>(hw[e]);
    lw[e] = pack_pair<Op>(v[2 * e] - r.x, v[2 * e + 1] - r.y);
  }
  *reinterpret_cast<uint4*>(hi + offset) = h;
  if (lo) *reinterpret_cast<uint4*>(lo + offset) = l;
}

// Where element (row, col) of a [*][kCols] tile lives in the mma.sync kernels' row-swizzled layout (tile/mma.cuh);
// the wgmma kernel stages its tiles through wgmma::Sw128Tile, which has the same offset().
template <int kCols> struct RowSwizzle {
  __device__ __forceinline__ static int offset(int row, int col) { return tile::swizzle<kCols>(row, col); }
};

// Rows [0, 64) x columns [col0, col0 + kCols) of a buffer with `row_stride` elements per row, on their way into a
// swizzled [64][kCols] bf16 tile: load() issues every load of this thread (zeros at rows >= valid, or when src is
// null); store() scales row r by scale[r] (null: 1) and writes the tile (and the residuals into lo, if non-null).
// Loading early and storing late lets a kernel wait for memory once for several tiles; the pieces wait in T, not
// widened (bf16 keys in half the registers, which the sequential passes, holding the next chunk's pieces through
// the current chunk's product, run short of).
template <class T, int kCols, int kThreads> struct RowPieces {
  static constexpr int kPerRow = kCols / 8, kIters = kC * kPerRow / kThreads;
  static_assert(kC * kPerRow % kThreads == 0, "whole 8-column pieces per thread");
  Pack<T, 8> v[kIters];

  __device__ __forceinline__ static int row(int it) { return (int(threadIdx.x) + it * kThreads) / kPerRow; }
  __device__ __forceinline__ static int col(int it) { return (int(threadIdx.x) + it * kThreads) % kPerRow * 8; }

  __device__ __forceinline__ void load(const T* src, int64_t row_stride, int col0, int valid) {
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      if (src && row(it) < valid) {
        v[it] = *reinterpret_cast<const Pack<T, 8>*>(src + row(it) * row_stride + col0 + col(it));
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) v[it].v[e] = from_float<T>(0.f);
      }
    }
  }
  // The same rows copied by cp.async into a shared [64][kCols] array of T (zeros at rows >= valid; the caller commits
  // and waits), and read back from there: a prefetch that holds no registers while it is in flight.
  __device__ __forceinline__ static void load_async(T* staged, const T* src, int64_t row_stride, int col0, int valid) {
    constexpr int kCopies = int(sizeof(Pack<T, 8>)) / 16;
#pragma unroll
    for (int it = 0; it < kIters; ++it)
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const int c = col(it) + i * 16 / int(sizeof(T));
        const bool live = row(it) < valid;
        tile::cp_async_16(staged + row(it) * kCols + c, live ? src + row(it) * row_stride + col0 + c : src, live);
      }
  }
  __device__ __forceinline__ void load_staged(const T* staged) {
#pragma unroll
    for (int it = 0; it < kIters; ++it)
      v[it] = *reinterpret_cast<const Pack<T, 8>*>(staged + row(it) * kCols + col(it));
  }
  template <class Layout = RowSwizzle<kCols>, class Op>
  __device__ __forceinline__ void store(Op* hi, NotDeduced<Op>* lo, const float* scale) const {
    float s[kIters];
#pragma unroll
    for (int it = 0; it < kIters; ++it) s[it] = scale ? scale[row(it)] : 1.f;
    store<Layout>(hi, lo, s);
  }
  // The same with piece it's row scaled by s[it].
  template <class Layout = RowSwizzle<kCols>, class Op>
  __device__ __forceinline__ void store(Op* hi, NotDeduced<Op>* lo, const float (&s)[kIters]) const {
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      float f[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] = to_float(v[it].v[e]) * s[it];
      store_split(hi, lo, Layout::offset(row(it), col(it)), f);
    }
  }
  // For each piece, the power of two that brings its row's norm into [0.5, 1) (1 for a zero row); the kPerRow lanes
  // that hold a row's pieces sit side by side in one warp.
  __device__ __forceinline__ void pow2_row_scales(float (&s)[kIters]) const {
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      float sq = 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) sq += to_float(v[it].v[e]) * to_float(v[it].v[e]);
#pragma unroll
      for (int offset = kPerRow / 2; offset > 0; offset >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, offset);
      s[it] = pow2_scale_into(sqrtf(sq), 0);
    }
  }
};

template <class T, int kCols, int kThreads, class Layout = RowSwizzle<kCols>, class Op>
__device__ __forceinline__ void stage_rows(Op* hi, NotDeduced<Op>* lo, const T* src, int64_t row_stride, int col0,
                                           int valid, const float* scale) {
  RowPieces<T, kCols, kThreads> pieces;
  pieces.load(src, row_stride, col0, valid);
  pieces.template store<Layout>(hi, lo, scale);
}

// The scale stage_matrix applies by default: none.
struct Unscaled {
  __device__ __forceinline__ float operator()(float) const { return 1.f; }
};

// An f32 [D][D] matrix (row-major) into swizzled 16-bit tiles hi (and lo, if non-null: the rounding residual), loads
// first as above, each value times scale_of(this thread's max |m|) (a functor every thread calls: fp16 tiles need the
// block's range). Returns this thread's part of Σ m² of the unscaled values.
template <int D, int kThreads, class Layout = RowSwizzle<D>, class Op, class ScaleOf = Unscaled>
__device__ __forceinline__ float stage_matrix(Op* hi, NotDeduced<Op>* lo, const float* m, ScaleOf scale_of = {}) {
  constexpr int kIters = D * D / 8 / kThreads;
  static_assert(D * D / 8 % kThreads == 0, "whole 8-column pieces per thread");
  float v[kIters][8];
#pragma unroll
  for (int it = 0; it < kIters; ++it) load_floats<float, 8>(m + (int(threadIdx.x) + it * kThreads) * 8, v[it]);
  float squares = 0.f, max_abs = 0.f;
#pragma unroll
  for (int it = 0; it < kIters; ++it)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      squares += v[it][e] * v[it][e];
      max_abs = fmaxf(max_abs, fabsf(v[it][e]));
    }
  const float scale = scale_of(max_abs);
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = int(threadIdx.x) + it * kThreads, row = i / (D / 8), col = (i % (D / 8)) * 8;
#pragma unroll
    for (int e = 0; e < 8; ++e) v[it][e] *= scale;
    store_split(hi, lo, Layout::offset(row, col), v[it]);
  }
  return squares;
}

// The 8-warp tiling of a chunk's [64][D] rows: warp (wm, wn) = (warp % 4, warp / 4) owns rows 16·wm .. +16, the
// D/2 columns from wn·D/2 (as D/16 accumulator tiles) and, for 64 x 64 products, the 32 columns from 32·wn.
template <int D> struct WarpTile {
  int lane, m0, ncol0, pcol0;
  __device__ static WarpTile of_thread() {
    const int warp = int(threadIdx.x >> 5);
    return {int(threadIdx.x & 31), 16 * (warp & 3), (warp >> 2) * (D / 2), (warp >> 2) * 32};
  }
  __device__ int row(int half) const { return m0 + (lane >> 2) + 8 * half; }  // of accumulator element 2·half
};

// This thread's elements of a [64][D] chunk buffer (rows of `c`) into accumulator layout (kNT n-tiles from the tile's
// ncol0); 0 past the chunk. Tile: a WarpTile or any type with lane, ncol0 and row(half).
template <class T, int kNT, class Tile>
__device__ __forceinline__ void load_rows(float (&v)[kNT][4], const T* src, const ChunkRef& c, const Tile& s) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = s.row(half);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      float pair[2] = {0.f, 0.f};
      if (row < c.len) load_floats<T, 2>(src + c.row0 + row * c.row_stride + s.ncol0 + 8 * nt + 2 * (s.lane & 3), pair);
      v[nt][2 * half] = pair[0];
      v[nt][2 * half + 1] = pair[1];
    }
  }
}

template <class T, int kNT, class Tile>
__device__ __forceinline__ void store_rows(T* dst, const float (&v)[kNT][4], const ChunkRef& c, const Tile& s) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = s.row(half);
    if (row >= c.len) continue;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float pair[2] = {v[nt][2 * half], v[nt][2 * half + 1]};
      store_floats<T, 2>(dst + c.row0 + row * c.row_stride + s.ncol0 + 8 * nt + 2 * (s.lane & 3), pair);
    }
  }
}

// Σ over this thread's columns of a ⊙ b, per row, added into rows[] (shared, zeroed; the warps that share a row add
// in any order: two addends into 0 are exact).
template <int kNT, class Tile> __device__ __forceinline__ void add_row_dots(float* rows, const float (&a)[kNT][4],
                                                                            const float (&b)[kNT][4], const Tile& s) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float v = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) v += a[nt][2 * half] * b[nt][2 * half] + a[nt][2 * half + 1] * b[nt][2 * half + 1];
    v = tile::row_sum(v);
    if ((s.lane & 3) == 0) atomicAdd(rows + s.row(half), v);
  }
}

// Host-side dispatch on head_dim (64 or 128, validated by the op) and on the I/O dtype (bf16 or f32; f32 is precise:
// the backward's products with x, s and Ĥ take them as hi + lo pairs, chebyshev_solve.h).
template <class F> void with_dim(int64_t D, F&& f) {
  if (D == 64)
    f(std::integral_constant<int, 64>{});
  else
    f(std::integral_constant<int, 128>{});
}
template <class F> void with_dtype(DType dtype, F&& f) {
  if (dtype == DType::BF16)
    f(bf16{});
  else
    f(float{});
}

}  // namespace primer::ops::cuda_ops::cheb
