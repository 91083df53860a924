// Two ways to run one chunked kernel's products of stored tiles, with the same accumulators, so that a kernel body
// written against either is written once:
//   WarpProducts  (sm_80+): each warp loads its operand fragments by ldmatrix and multiplies with mma.sync; tiles
//                 in tile/mma.cuh's swizzle.
//   GroupProducts (sm_90a): each warpgroup issues wgmma on operands the tensor cores read from shared memory once
//                 per warpgroup (not once per warp); tiles in wgmma.cuh's 128-byte-swizzled column blocks. Products
//                 issued ahead (*_async) run while the warps work on earlier results. On an H200 this took the
//                 per-chunk gradient kernels 4–16% faster (docs/perf.md, "The per-chunk gradient kernels on warpgroup
//                 MMA").
// Both hand back a warp's part of a 64-row output as tile::WarpGrid<64, G·N, 4·G> lays it out for G warpgroups: warp w
// holds rows 16·(w % 4) + {g, g + 8} and the columns n0 = (w / 4)·N onwards, which for wgmma is warpgroup w / 4
// computing the 64 × N block at n0 (wgmma.cuh: its accumulators have mma.sync's layout). So the epilogues
// (tile/warp_mma.cuh's visitors) are shared; what differs is below: where an element lives, how tiles move, the
// barrier, the products. GroupProducts' products are issued only in the sm_90a pass (launch its kernels where
// wgmma_available()).
#pragma once
#include "core/ops/cuda/tile/warp_mma.cuh"
#include "core/ops/cuda/tile/wgmma.cuh"

namespace primer::ops::cuda_ops::tile {

// tile/mma.cuh's swizzle as a layout type (offset(row, col)), as wgmma::Sw128Tile<kRows, kCols> is one.
template <int kRows, int kCols> struct SwizzledRows {
  __device__ __forceinline__ static int offset(int row, int col) { return swizzle<kCols>(row, col); }
};

// What follows from where an element lives (Products::Layout<kRows, kCols>::offset): its offset, the accumulator
// stored as bf16, and a pair read back.
template <class Products> struct TileAccess {
  template <int kRows, int kCols> __device__ __forceinline__ static int offset(int row, int col) {
    return Products::template Layout<kRows, kCols>::offset(row, col);
  }
  template <int kRows, int kCols, int kTiles>
  __device__ __forceinline__ static void store(bf16* tile, const float (&acc)[kTiles][4], int m0, int n0, int lane) {
    for_each_pair(acc, m0, n0, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<uint32_t*>(tile + offset<kRows, kCols>(r, c)) = pack_bf16(v0, v1);
    });
  }
  // Elements (row, col) and (row, col + 1), col even.
  template <int kRows, int kCols> __device__ __forceinline__ static float2 pair(const bf16* tile, int row, int col) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(tile + offset<kRows, kCols>(row, col)));
  }
};

struct WarpProducts : TileAccess<WarpProducts> {
  static constexpr bool kPerWarp = true;     // each warp multiplies its own fragments (and may skip some)
  static constexpr int kAlignmentSlack = 0;  // shared-memory bytes kept in front of the tiles to align them
  __device__ __forceinline__ static bf16* tiles(unsigned char* smem) { return reinterpret_cast<bf16*>(smem); }

  template <int kRows, int kCols> using Layout = SwizzledRows<kRows, kCols>;
  // The row of element e of a tile walked in storage order (the swizzle permutes within a row).
  template <int kRows, int kCols> __device__ __forceinline__ static int row_of_element(int e) { return e / kCols; }

  template <int kRows, int kCols, int kThreads>
  __device__ __forceinline__ static void load_async(bf16* smem, const bf16* global, int64_t row_stride, int valid) {
    load_tile_async<kRows, kCols, kThreads>(smem, global, row_stride, valid);
  }
  template <int kRows, int kCols, int kThreads>
  __device__ __forceinline__ static void store_rows(bf16* global, int64_t row_stride, const bf16* smem, int rows) {
    store_tile_rows<kRows, kCols, kThreads>(global, row_stride, smem, rows);
  }
  // After the CTA's shared stores and cp.async copies (waited for), before products read them.
  __device__ __forceinline__ static void sync() { __syncthreads(); }

  // acc += A·B (A stored [m][k], B stored [k][n]), A·Bᵀ (B stored [n][k]) and Aᵀ·B (A stored [k][m]), the stored
  // tiles kARows × kACols and kBRows × kBCols, over a depth of kDepth. A warp skips the 16-deep k-blocks outside
  // [kk_begin, kk_end) (where a triangle leaves its operand zero); a warpgroup runs them all.
  template <int kDepth, int kARows, int kACols, int kBRows, int kBCols, int kTiles>
  __device__ __forceinline__ static void ab(float (&acc)[kTiles][4], const bf16* A, const bf16* B, int m0, int n0,
                                            int lane, int kk_begin = 0, int kk_end = kDepth / 16) {
    mma_AB<kDepth, kACols, kBCols>(acc, A, B, m0, n0, lane, kk_begin, kk_end);
  }
  template <int kDepth, int kARows, int kACols, int kBRows, int kBCols, int kTiles>
  __device__ __forceinline__ static void abt(float (&acc)[kTiles][4], const bf16* A, const bf16* Bt, int m0, int n0,
                                             int lane, int kk_begin = 0, int kk_end = kDepth / 16) {
    mma_ABt<kDepth, kACols, kBCols>(acc, A, Bt, m0, n0, lane, kk_begin, kk_end);
  }
  template <int kDepth, int kARows, int kACols, int kBRows, int kBCols, int kTiles>
  __device__ __forceinline__ static void atb(float (&acc)[kTiles][4], const bf16* At, const bf16* B, int m0, int n0,
                                             int lane, int kk_begin = 0, int kk_end = kDepth / 16) {
    mma_AtB<kDepth, kACols, kBCols>(acc, At, B, m0, n0, lane, kk_begin, kk_end);
  }
  // Issued products that may still run while the caller does other work, until wait (see GroupProducts): a warp's
  // mma.sync products are complete when issued.
  template <int kDepth, int kARows, int kACols, int kBRows, int kBCols, int kTiles>
  __device__ __forceinline__ static void ab_async(float (&acc)[kTiles][4], const bf16* A, const bf16* B, int m0, int n0,
                                                  int lane) {
    ab<kDepth, kARows, kACols, kBRows, kBCols>(acc, A, B, m0, n0, lane);
  }
  template <int kDepth, int kARows, int kACols, int kBRows, int kBCols, int kTiles>
  __device__ __forceinline__ static void abt_async(float (&acc)[kTiles][4], const bf16* A, const bf16* Bt, int m0,
                                                   int n0, int lane) {
    abt<kDepth, kARows, kACols, kBRows, kBCols>(acc, A, Bt, m0, n0, lane);
  }
  template <int kDepth, int kARows, int kACols, int kBRows, int kBCols, int kTiles>
  __device__ __forceinline__ static void atb_async(float (&acc)[kTiles][4], const bf16* At, const bf16* B, int m0,
                                                   int n0, int lane) {
    atb<kDepth, kARows, kACols, kBRows, kBCols>(acc, At, B, m0, n0, lane);
  }
  template <int kPending, class... Accs> __device__ __forceinline__ static void wait(Accs&...) {}
};

struct GroupProducts : TileAccess<GroupProducts> {
  static constexpr bool kPerWarp = false;
  static constexpr int kAlignmentSlack = 1024;  // swizzle atoms are 1024-byte aligned
  __device__ __forceinline__ static bf16* tiles(unsigned char* smem) { return wgmma::aligned_tiles<bf16>(smem); }

  template <int kRows, int kCols> using Layout = wgmma::Sw128Tile<kRows, kCols>;
  template <int kRows, int kCols> __device__ __forceinline__ static int row_of_element(int e) {
    return e % (kRows * 64) / 64;  // column blocks of [kRows][64]
  }

  template <int kRows, int kCols, int kThreads>
  __device__ __forceinline__ static void load_async(bf16* smem, const bf16* global, int64_t row_stride, int valid) {
    wgmma::load_tile_async<kRows, kCols, kThreads>(smem, global, row_stride, valid, int(threadIdx.x));
  }
  template <int kRows, int kCols, int kThreads>
  __device__ __forceinline__ static void store_rows(bf16* global, int64_t row_stride, const bf16* smem, int rows) {
    wgmma::store_tile_rows<kRows, kCols, kThreads>(global, row_stride, smem, int(threadIdx.x), rows);
  }
  // Ordinary stores and cp.async copies reach wgmma (the async proxy) only through this fence, then the barrier.
  __device__ __forceinline__ static void sync() {
#ifdef PRIMER_WGMMA
    wgmma::fence_shared_for_async();
#endif
    __syncthreads();
  }

  template <int kDepth, int kARows, int kACols, int kBRows, int kBCols, int kTiles>
  __device__ __forceinline__ static void ab(float (&acc)[kTiles][4], const bf16* A, const bf16* B, int m0, int n0,
                                            int lane, int = 0, int = 0) {
    ab_async<kDepth, kARows, kACols, kBRows, kBCols>(acc, A, B, m0, n0, lane);
    wait<0>(acc);
  }
  template <int kDepth, int kARows, int kACols, int kBRows, int kBCols, int kTiles>
  __device__ __forceinline__ static void abt(float (&acc)[kTiles][4], const bf16* A, const bf16* Bt, int m0, int n0,
                                             int lane, int = 0, int = 0) {
    abt_async<kDepth, kARows, kACols, kBRows, kBCols>(acc, A, Bt, m0, n0, lane);
    wait<0>(acc);
  }
  template <int kDepth, int kARows, int kACols, int kBRows, int kBCols, int kTiles>
  __device__ __forceinline__ static void atb(float (&acc)[kTiles][4], const bf16* At, const bf16* B, int m0, int n0,
                                             int lane, int = 0, int = 0) {
    atb_async<kDepth, kARows, kACols, kBRows, kBCols>(acc, At, B, m0, n0, lane);
    wait<0>(acc);
  }

  // The same products issued as one group each, left running: the caller may do other work (not touching acc) and
  // issue more, then wait<N>(acc, ...) once at most N groups issued after acc's are still in flight (every
  // accumulator named is then the caller's again).
  template <int kDepth, int kARows, int kACols, int kBRows, int kBCols, int kTiles>
  __device__ __forceinline__ static void ab_async(float (&acc)[kTiles][4], const bf16* A, const bf16* B, int, int n0,
                                                  int) {
    issue<kDepth, 0, 1, wgmma::Sw128Tile<kARows, kACols>, wgmma::Sw128Tile<kBRows, kBCols>>(
        acc, wgmma::k_major<kARows, kACols>(A, 0, 0), wgmma::mn_major<kBRows, kBCols>(B, 0, n0));
  }
  template <int kDepth, int kARows, int kACols, int kBRows, int kBCols, int kTiles>
  __device__ __forceinline__ static void abt_async(float (&acc)[kTiles][4], const bf16* A, const bf16* Bt, int, int n0,
                                                   int) {
    issue<kDepth, 0, 0, wgmma::Sw128Tile<kARows, kACols>, wgmma::Sw128Tile<kBRows, kBCols>>(
        acc, wgmma::k_major<kARows, kACols>(A, 0, 0), wgmma::k_major<kBRows, kBCols>(Bt, n0, 0));
  }
  template <int kDepth, int kARows, int kACols, int kBRows, int kBCols, int kTiles>
  __device__ __forceinline__ static void atb_async(float (&acc)[kTiles][4], const bf16* At, const bf16* B, int, int n0,
                                                   int) {
    static_assert(kACols == 64, "Aᵀ's 64 output rows are one column block");
    issue<kDepth, 1, 1, wgmma::Sw128Tile<kARows, kACols>, wgmma::Sw128Tile<kBRows, kBCols>>(
        acc, wgmma::mn_major<kARows, kACols>(At, 0, 0), wgmma::mn_major<kBRows, kBCols>(B, 0, n0));
  }
  template <int kPending, class... Accs> __device__ __forceinline__ static void wait(Accs&... accs) {
#ifdef PRIMER_WGMMA
    wgmma::wait<kPending>();
    (wgmma::pin(wgmma::flat(accs)), ...);
#endif
  }

 private:
  // Byte offset of reduction index k0 in a stored operand tile: along its rows when MN-major (transposed), along its
  // column blocks when K-major.
  template <int kTrans, class Tile> __device__ __forceinline__ static int step(int k0) {
    return kTrans ? wgmma::mn_major_step(k0) : wgmma::k_major_step<Tile>(k0);
  }
  // The k-steps of one product issued back to back as one commit group; ATile, BTile: the stored operand tiles.
  template <int kDepth, int kTransA, int kTransB, class ATile, class BTile, int kTiles>
  __device__ __forceinline__ static void issue(float (&acc)[kTiles][4], uint64_t a, uint64_t b) {
#ifdef PRIMER_WGMMA
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kDepth / 16; ++kk)
      wgmma::wgmma_ss<kTransA, kTransB>(wgmma::flat(acc), wgmma::advance(a, step<kTransA, ATile>(16 * kk)),
                                        wgmma::advance(b, step<kTransB, BTile>(16 * kk)), 1);
    wgmma::commit();
#else
    __trap();
#endif
  }
};

}  // namespace primer::ops::cuda_ops::tile
