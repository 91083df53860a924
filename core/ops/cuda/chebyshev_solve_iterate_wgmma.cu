// The Chebyshev iteration of chebyshev_solve_iterate.cu (its header says what a chunk's matvec computes) on Hopper's
// warpgroup MMA (sm_90a). There, each warp's ldmatrix traffic (every warp loads K and both halves of H_0 for every
// matvec), not the tensor work, bounded the kernel; here the tensor cores read the operands from shared memory
// themselves. D/64 warpgroups share a chunk: group g keeps the iterate's columns [64g, 64g + 64) of the chunk's 64
// rows in registers (warp w of the group rows 16w .. 16w + 15, in the accumulator layout of tile/mma.cuh, so the
// per-row steps are chebyshev_solve_iterate.cuh's). Each group forms its share of the tokens' columns of the masked
// product P = (X Kᵀ) ⊙ Mᵀ, which enters P K as the register operand; with two groups (D = 128) each passes its half to
// the other through shared memory behind a second barrier, which X H_0ᵀ runs through. (Each group forming all of P
// instead, as this kernel did until 2026-11-29, repeats a sixth of a precise matvec's products.) The staged iterate
// alternates between two buffers, so the first barrier of an iteration also orders each write after the other
// group's last read of that buffer (two iterations back); the P tiles' writes come after that barrier, so after the
// other group's P K of the iteration before. Registers are what the design runs short of (the iterate, its
// predecessor, the decay mask, the products' accumulators and P's operand fragments): the right-hand side waits in
// shared memory.
#include <cstdint>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/chebyshev_solve_iterate.cuh"
#include "core/ops/cuda/chebyshev_solve_kernels.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/tile/block_reduce.cuh"
#include "core/ops/cuda/tile/warp_mma.cuh"
#include "core/ops/cuda/tile/wgmma.cuh"

namespace primer::ops::cuda_ops::cheb {
namespace {

constexpr int kNT = 8;  // a warp's 64 columns as n-tiles of 8
using Acc = float[kNT][4];
using wgmma::flat;

// Group g of kGroups owns the iterate's columns [64g, 64g + 64) and forms the columns [kTokens·g, kTokens·(g + 1)) of
// P = X Kᵀ (the chunk's tokens), kPNT n-tiles; P K needs all of P, so with two groups each passes its half to the
// other through shared memory (the P tiles).
template <int D> struct Layout {
  static constexpr int kGroups = D / 64, kThreads = 128 * kGroups;
  static constexpr int kTokens = kC / kGroups, kPNT = kTokens / 8;
  using States = wgmma::Sw128Tile<D, D>;
  using Rows = wgmma::Sw128Tile<kC, D>;  // K and the staged iterate
  using PTile = wgmma::Sw128Tile<kC, kC>;
};

// Shared memory: H_0 hi + lo, K, two iterate buffers (hi, and lo when split), with two groups the P tile (hi, and lo
// when split), the 1024-byte aligned tiles; then the right-hand side (Rhs) and the per-row scalars.
template <int D, bool kSplit> struct IterateSmem {
  static constexpr int kPTiles = Layout<D>::kGroups > 1 ? (kSplit ? 2 : 1) : 0;
  static constexpr int kTileElems = 2 * D * D + kC * D + (kSplit ? 4 : 2) * kC * D + kPTiles * kC * kC;
  static constexpr int kRhsFloats = 4 * kNT * Layout<D>::kThreads;
  static constexpr int kBytes =
      1024 + kTileElems * int(sizeof(bf16)) + (kRhsFloats + RowScalars::kFloats) * int(sizeof(float));
};

// The right-hand side across the iterations, in shared memory (the registers are full): one float4 per n-tile,
// the threads side by side (conflict-free).
template <int kThreads> struct Rhs {
  float4* at;
  __device__ __forceinline__ void set(const Acc& r) const {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
      at[nt * kThreads + threadIdx.x] = make_float4(r[nt][0], r[nt][1], r[nt][2], r[nt][3]);
  }
  __device__ __forceinline__ void get(Acc& r) const {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float4 f = at[nt * kThreads + threadIdx.x];
      r[nt][0] = f.x, r[nt][1] = f.y, r[nt][2] = f.z, r[nt][3] = f.w;
    }
  }
};

// Warp (w, g) = (warp % 4, warp / 4) owns rows 16w .. +16 and columns 64g .. +64.
struct GroupTile {
  int lane, m0, ncol0;
  __device__ static GroupTile of_thread() {
    const int warp = int(threadIdx.x >> 5);
    return {int(threadIdx.x & 31), 16 * (warp & 3), 64 * (warp >> 2)};
  }
  __device__ int row(int half) const { return m0 + (lane >> 2) + 8 * half; }  // of accumulator element 2·half
};

// Op: the 16-bit operand type of the tiles (bf16, or fp16 in the fp16 mode).
// The staged iterate: two buffers x[0], x[1] (Layout::Rows) and, when split, their lo halves two tiles further on.
// This thread's accumulator pair (nt, half) lies at byte (pairs ^ (nt << 4)) + 1024·half of buffer 0, pairs being the
// address of pair (0, 0): a row's 16-byte chunks are XOR-swizzled by row % 8, which is lane / 4 for every row of the
// thread, so one XOR per n-tile addresses them, and the rest are the stores' immediate offsets.
// The P tiles (two groups) take this group's pairs of P ⊙ Mᵀ the same way: pair (nt, half) at byte
// (p_pairs ^ (nt << 4)) + 1024·half of the hi tile, the lo tile one tile further on.
template <int D, class Op> struct Tiles : GroupTile {
  static constexpr uint32_t kTileBytes = kC * D * sizeof(Op);
  const Op *h_hi, *h_lo, *k, *p_hi, *p_lo;
  Op *x[2], *x_lo[2];
  uint32_t pairs, p_pairs;
  int tok0;    // this group's first token of P
  int buffer;  // the iterate buffer the next matvec stages into
};

#ifdef PRIMER_WGMMA
// The descriptors of one matvec's operands, made where they are used: a descriptor per k-block, hoisted out of the
// iteration loop by the compiler, would hold some 60 registers the iterate needs. Each operand's k-blocks are its
// base descriptor plus a constant (shared-memory addresses fit the descriptor's 14-bit field, so no carry leaves it),
// and each base passes through an empty asm so that it, not its sums, is what lives across the loop.
struct Operand {
  uint64_t base;
  __device__ __forceinline__ explicit Operand(uint64_t d) : base(d) { asm volatile("" : "+l"(base)); }
  __device__ __forceinline__ uint64_t at(int elems) const { return base + uint64_t((elems * 2) >> 4); }
};
// The k-block of 16 reduction columns from k0 of a K-major Sw128Tile with kRows rows, as an element offset.
template <int kRows> __device__ __forceinline__ constexpr int k_block(int k0) {
  return (k0 >> 6) * kRows * 64 + (k0 & 63);
}

// Issues P = A Kᵀ (this group's kTokens columns of the 64 x 64) and then Y = A H_0ᵀ (this group's 64 columns, H_0 as
// hi + lo) as two commit groups, for a staged [64][D] tile A, and A_lo with it when kLo (the lo x H_0-lo product, 2^-18
// of the result, is left out).
template <int D, bool kLo, class Op> __device__ __forceinline__ void issue_products(float (&p)[Layout<D>::kPNT][4],
                                                                                    Acc& y, const Op* A, const Op* A_lo,
                                                                                    const Tiles<D, Op>& s) {
  using wgmma::k_major;
  const Operand a(k_major<kC, D>(A, 0, 0)), k(k_major<kC, D>(s.k, s.tok0, 0));
  const Operand a_lo(kLo ? k_major<kC, D>(A_lo, 0, 0) : 0);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    wgmma::wgmma_ss<0, 0, Op>(flat(p), a.at(k_block<kC>(16 * kk)), k.at(k_block<kC>(16 * kk)), kk > 0);
    if constexpr (kLo) wgmma::wgmma_ss<0, 0, Op>(flat(p), a_lo.at(k_block<kC>(16 * kk)), k.at(k_block<kC>(16 * kk)), 1);
  }
  wgmma::commit();
  const Operand h_hi(k_major<D, D>(s.h_hi, s.ncol0, 0)), h_lo(k_major<D, D>(s.h_lo, s.ncol0, 0));
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int at = k_block<kC>(16 * kk), h_at = k_block<D>(16 * kk);
    wgmma::wgmma_ss<0, 0, Op>(flat(y), a.at(at), h_hi.at(h_at), kk > 0);
    wgmma::wgmma_ss<0, 0, Op>(flat(y), a.at(at), h_lo.at(h_at), 1);
    if constexpr (kLo) wgmma::wgmma_ss<0, 0, Op>(flat(y), a_lo.at(at), h_hi.at(h_at), 1);
  }
  wgmma::commit();
}

__device__ __forceinline__ float square(float v) { return v * v; }
// The token (column of P = X Kᵀ) of this thread's element (nt, e) of its group's part of P.
template <class Tile> __device__ __forceinline__ int key_column(int nt, int e, const Tile& s) {
  return s.tok0 + 8 * nt + 2 * (s.lane & 3) + (e & 1);
}

// The fp16 mode's per-row scale of a staged matvec operand, and its inverse. Each token's system is its own, so each
// row scales alone: the iterate by λ_c/‖R_c‖ (λ_c = ridge·‖H_c‖_F is the smallest eigenvalue of H_c + λ_c I, so
// ‖λ_c X_c‖ ≤ ‖R_c‖: staged rows of norm ≤ 1 whatever ‖H_c‖_F, the ridge and the right-hand side's scale; x_c ≈
// R_c/λ_c off the keys' span, and λ_c spans orders of magnitude across a chunk), the backward's x by 1/‖x_c‖. inv
// also undoes P's row gain (the mask's). 0 (and 0 back) where the row is 0.
struct RowScale {
  float f[2], inv[2];
  template <class Tile> __device__ __forceinline__ void set(const float* sq, const float (&numerator)[2],
                                                            const float (&p_gain)[2], const Tile& s) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float norm = sqrtf(sq[s.row(half)]);
      const bool live = norm > 0.f && numerator[half] > 0.f;
      f[half] = live ? numerator[half] / norm : 0.f;
      inv[half] = live ? norm / (numerator[half] * p_gain[half]) : 0.f;
    }
  }
};

// Y = H_c X_c for this group's columns of the chunk's 64 rows; X in this thread's registers. One barrier; every
// thread must call it. X H_0ᵀ is multiplied by h_scale (ζ_c, over the fp16 mode's scale of H_0). kScaled (the fp16
// mode): the rows are staged times rows.f and the products' sum is multiplied back by rows.inv.
template <int D, bool kSplit, bool kScaled, class Op>
__device__ __forceinline__ void chunk_matvec(Acc& Y, const Acc& X, const float (&mask)[Layout<D>::kPNT][4],
                                             const float (&h_scale)[2], const RowScale& rows, Tiles<D, Op>& s) {
  using L = Layout<D>;
  constexpr int kOwn = L::kTokens / 16;  // the k-blocks of P K whose P this group formed
  constexpr uint32_t kTileBytes = Tiles<D, Op>::kTileBytes;
  Op* x = s.buffer ? s.x[1] : s.x[0];  // (a select: indexing by a variable would put the array in local memory)
  Op* x_lo = s.buffer ? s.x_lo[1] : s.x_lo[0];
  const uint32_t pairs = s.pairs + (s.buffer ? kTileBytes : 0u);
  s.buffer ^= 1;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float f = kScaled ? rows.f[half] : 1.f;
      const float v0 = X[nt][2 * half] * f, v1 = X[nt][2 * half + 1] * f;
      const uint32_t h = pack_pair<Op>(v0, v1), at = (pairs ^ (nt << 4)) + 1024 * half;
      tile::st_shared_u32(at, h);
      if constexpr (kSplit) {
        const float2 hv = unpack_pair<Op>(h);
        tile::st_shared_u32(at + 2 * kTileBytes, pack_pair<Op>(v0 - hv.x, v1 - hv.y));
      }
    }
  wgmma::fence_shared_for_async();
  __syncthreads();

  float p[L::kPNT][4];
  issue_products<D, kSplit>(p, Y, x, x_lo, s);
  wgmma::wait<1>();  // P is ready; X H_0ᵀ may still run
  wgmma::pin(flat(p));
  // P ⊙ Mᵀ as the A operand of P K (this group's k-blocks kk: tokens tok0 + 16kk .. +16), hi and, when split, lo; with
  // two groups also into the P tiles, for the other.
  uint32_t a[kOwn][4], a_lo[kOwn][4];
#pragma unroll
  for (int kk = 0; kk < kOwn; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int nt = 2 * kk + (i >> 1), e = 2 * (i & 1);
      const float v0 = p[nt][e] * mask[nt][e], v1 = p[nt][e + 1] * mask[nt][e + 1];
      a[kk][i] = pack_pair<Op>(v0, v1);
      const float2 hv = unpack_pair<Op>(a[kk][i]);
      a_lo[kk][i] = kSplit ? pack_pair<Op>(v0 - hv.x, v1 - hv.y) : 0u;
      if constexpr (L::kGroups > 1) {
        const uint32_t at = (s.p_pairs ^ (nt << 4)) + 1024 * (i & 1);
        tile::st_shared_u32(at, a[kk][i]);
        if constexpr (kSplit) tile::st_shared_u32(at + kC * kC * sizeof(Op), a_lo[kk][i]);
      }
    }
  if constexpr (L::kGroups > 1) {  // (X H_0ᵀ runs on through the barrier)
    wgmma::fence_shared_for_async();
    __syncthreads();
  }
  wgmma::wait<0>();
  wgmma::pin(flat(Y));
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) Y[nt][e] *= h_scale[e >> 1];
  // + ((X Kᵀ) ⊙ Mᵀ) K, K as the [token][column] (MN-major) operand: the other group's k-blocks from the P tiles, this
  // group's from registers.
  const Operand k(wgmma::mn_major<kC, D>(s.k, 0, s.ncol0));
  const int own0 = s.tok0 / 16;
  wgmma::fence();
  if constexpr (L::kGroups > 1) {
    const int other0 = kOwn - own0;  // (two groups: the other half's first k-block)
    const Operand ph(wgmma::k_major<kC, kC>(s.p_hi, 0, 0)), pl(kSplit ? wgmma::k_major<kC, kC>(s.p_lo, 0, 0) : 0);
#pragma unroll
    for (int o = 0; o < kOwn; ++o) {
      const int kk = other0 + o;
      wgmma::wgmma_ss<0, 1, Op>(flat(Y), ph.at(16 * kk), k.at(16 * kk * 64), 1);
      if constexpr (kSplit) wgmma::wgmma_ss<0, 1, Op>(flat(Y), pl.at(16 * kk), k.at(16 * kk * 64), 1);
    }
  }
#pragma unroll
  for (int kk = 0; kk < kOwn; ++kk) {
    wgmma::wgmma_rs<1, Op>(flat(Y), a[kk], k.at(16 * (own0 + kk) * 64), 1);
    if constexpr (kSplit) wgmma::wgmma_rs<1, Op>(flat(Y), a_lo[kk], k.at(16 * (own0 + kk) * 64), 1);
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::pin(flat(Y));
  wgmma::pin(a);
  wgmma::pin(a_lo);
  if constexpr (kScaled)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) Y[nt][e] *= rows.inv[e >> 1];
}

// The fp16 mode's range: the power of two 2^-e that brings the CTA's largest |value| (each thread's max in `local`)
// into [2^(top-1), 2^top), or 1 when every value is 0. Exact as a scale; every thread must call it (two barriers).
template <int kThreads> __device__ __forceinline__ float block_pow2_scale(float local, float* scratch, int top) {
  local = warp_max(local);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = local;
  __syncthreads();
  float all = 0.f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) all = fmaxf(all, scratch[w]);
  __syncthreads();  // the scratch is free again
  return pow2_scale_into(all, top);
}
#endif  // PRIMER_WGMMA

// Op = __half: the fp16 mode (ChebyshevOptions::f16_operands; kSplit = kBackward): X, P and K one fp16 operand each,
// H_0 an fp16 pair; the backward's one product H x as pairs (the gates' gradients were 0.05–0.36 off without). fp16
// rounds at 2^-12 where bf16 rounds at 2^-9, at the same tensor-core rate, so one operand each costs what the one-bf16
// iterate costs and its error, amplified by up to κ = (1 + ridge)/ridge as that one's is, stays within a few times the
// precise mode's (tools/numerics/gka_iterate_operands.py, and GkaMixerCuda.Bf16LayerAtTheDefaultRidge). The keys are
// the bf16 values the chunk-state, state-gradient and dk kernels take, each row scaled by a power of two: an iteration
// on other keys (f32 ones rounded to fp16) solves another system than the one those kernels differentiate, which left
// the gates' gradients 0.07–0.86 off in that layer test. fp16's range is kept by powers of two and per-row factors,
// undone in f32: H_0 by its largest entry, the keys' rows to a norm in [0.5, 1), the staged X rows (RowScale), and P's
// rows through the mask.
template <int D, class T, bool kBackward, bool kSplit, class Op>
__global__ void __launch_bounds__(Layout<D>::kThreads, 1) iterate_wgmma_kernel(IterateArgs a) {
  cuda::await_prior_grid();
#ifdef PRIMER_WGMMA
  constexpr bool kF16 = std::is_same_v<Op, __half>;
  static_assert(!kF16 || kSplit == kBackward, "the fp16 mode's backward keeps the pair buffers for H x");
  using L = Layout<D>;
  extern __shared__ unsigned char smem_raw[];
  Op* base = wgmma::aligned_tiles<Op>(smem_raw);
  Tiles<D, Op> s;
  static_cast<GroupTile&>(s) = GroupTile::of_thread();
  Op* h_hi = base;
  Op* h_lo = h_hi + D * D;
  Op* k_tile = h_lo + D * D;
  s.h_hi = h_hi;
  s.h_lo = h_lo;
  s.k = k_tile;
  s.x[0] = k_tile + kC * D;
  s.x[1] = s.x[0] + kC * D;
  s.x_lo[0] = kSplit ? s.x[1] + kC * D : nullptr;
  s.x_lo[1] = kSplit ? s.x_lo[0] + kC * D : nullptr;
  s.pairs = tile::smem_address(s.x[0]) + sizeof(Op) * L::Rows::offset(s.m0 + (s.lane >> 2), s.ncol0 + 2 * (s.lane & 3));
  s.tok0 = (s.ncol0 / 64) * L::kTokens;
  s.p_hi = (kSplit ? s.x_lo[1] : s.x[1]) + kC * D;
  s.p_lo = kSplit ? s.p_hi + kC * kC : nullptr;
  s.p_pairs =
      tile::smem_address(s.p_hi) + sizeof(Op) * L::PTile::offset(s.m0 + (s.lane >> 2), s.tok0 + 2 * (s.lane & 3));
  s.buffer = 0;
  using Smem = IterateSmem<D, kSplit>;
  float4* rhs_smem = reinterpret_cast<float4*>(base + Smem::kTileElems);
  const RowScalars sc(reinterpret_cast<float*>(rhs_smem) + Smem::kRhsFloats);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t bh = blockIdx.y;
  const ChunkRef c = a.geo.chunk(bh, blockIdx.x, D);

  // Stage K and H_0 for the tensor cores; ‖H_0‖² and the chunk's log-decays on the way. The fp16 mode brings H_0's
  // largest entry into [2^12, 2^13) by a power of two, h_pow2.
  if constexpr (kF16) {  // each key row scaled by a power of two to a norm in [0.5, 1): fp16's range at any β
    using Keys = RowPieces<T, D, L::kThreads>;
    Keys keys;
    keys.load(static_cast<const T*>(a.k) + c.row0, c.row_stride, 0, c.len);
    if constexpr (!std::is_same_v<T, bf16>)  // the keys as the other kernels take them (see above)
#pragma unroll
      for (int it = 0; it < Keys::kIters; ++it)
#pragma unroll
        for (int e = 0; e < 8; ++e) keys.v[it].v[e] = __bfloat162float(__float2bfloat16(to_float(keys.v[it].v[e])));
    float key_scale[Keys::kIters];
    keys.pow2_row_scales(key_scale);
    keys.template store<typename L::Rows>(k_tile, nullptr, key_scale);
#pragma unroll
    for (int it = 0; it < Keys::kIters; ++it)
      if (Keys::col(it) == 0) sc.key_unscale[Keys::row(it)] = 1.f / key_scale[it];  // exact: powers of two
  } else {
    stage_rows<T, D, L::kThreads, typename L::Rows>(k_tile, nullptr, static_cast<const T*>(a.k) + c.row0, c.row_stride,
                                                    0, c.len, nullptr);
  }
  float h_pow2 = 1.f;
  const float* h0 = a.states + a.geo.state(bh, blockIdx.x, D);
  float h0_part;
  if constexpr (kF16)
    h0_part = stage_matrix<D, L::kThreads, typename L::States>(
        h_hi, h_lo, h0, [&](float local) { return h_pow2 = block_pow2_scale<L::kThreads>(local, sc.range, 13); });
  else
    h0_part = stage_matrix<D, L::kThreads, typename L::States>(h_hi, h_lo, h0);
  const float h_unscale = 1.f / h_pow2;
  const float h0_sq = warp_sum(h0_part);
  if (lane == 0) sc.warp[warp] = h0_sq;
  chunk_log_decays(sc.g, a.gk, c);
  if (threadIdx.x < kC)
    sc.quad[threadIdx.x] = sc.fresh[threadIdx.x] = sc.dot1[threadIdx.x] = sc.dot2[threadIdx.x] =
        sc.rhs_sq[threadIdx.x] = sc.x_sq[threadIdx.x] = sc.p_max[threadIdx.x] = 0.f;
  wgmma::fence_shared_for_async();
  __syncthreads();

  // Eq. (5)'s per-row ingredients: k_jᵀH_0k_j from K H_0ᵀ, and the Gram terms of the in-chunk part from K Kᵀ.
  float mask[L::kPNT][4];
  chunk_mask(mask, sc.g, c.len, s.tok0, s);
  {
    float p[L::kPNT][4];
    Acc z, kk;
    issue_products<D, false>(p, z, s.k, static_cast<const Op*>(nullptr), s);
    wgmma::wait<0>();
    wgmma::pin(flat(p));
    wgmma::pin(flat(z));
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float2 pair = unpack_pair<Op>(
            *reinterpret_cast<const uint32_t*>(s.k + L::Rows::offset(s.row(half), s.ncol0 + 8 * nt + 2 * (lane & 3))));
        // (z is K times H_0 as staged; in the fp16 mode K's row c is s_c k_c)
        const float f = kF16 ? h_unscale * square(sc.key_unscale[s.row(half)]) : h_unscale;
        kk[nt][2 * half] = pair.x * f;
        kk[nt][2 * half + 1] = pair.y * f;
      }
    add_row_dots(sc.quad, z, kk, s);
    if constexpr (kF16)  // P[c][j] = s_c s_j k_c·k_j
#pragma unroll
      for (int nt = 0; nt < L::kPNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) p[nt][e] *= sc.key_unscale[s.row(e >> 1)] * sc.key_unscale[key_column(nt, e, s)];
    add_fresh_terms(sc.fresh, mask, p, s.tok0, s);
  }
  // The fp16 mode: from here the mask also undoes the keys' scales ((X K'ᵀ) ⊙ Mᵀ / s_j², times K' = S K, is
  // ((X Kᵀ) ⊙ Mᵀ) K), and brings each row of the staged P into fp16's range: a staged X row has norm ≤ 1 (RowScale)
  // and a staged key too, so |P[c][j]| ≤ Mᵀ[c][j] / s_j², whose row maximum a power of two, p_gain, brings into
  // [2^13, 2^14) (room for the iterate's overshoot). Y's rows are unscaled by it with the X scale (RowScale::set).
  // (Each group holds its tokens' part of a row: the groups' row maxima meet in sc.p_max, non-negative floats, whose
  // order their bit patterns keep as integers.)
  float p_gain[2] = {1.f, 1.f};
  if constexpr (kF16) {
    float largest[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < L::kPNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        mask[nt][e] *= square(sc.key_unscale[key_column(nt, e, s)]);
        largest[e >> 1] = fmaxf(largest[e >> 1], mask[nt][e]);
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float row_largest = tile::row_max(largest[half]);
      if ((lane & 3) == 0) atomicMax(reinterpret_cast<int*>(sc.p_max + s.row(half)), __float_as_int(row_largest));
    }
  }
  __syncthreads();
  if constexpr (kF16) {
#pragma unroll
    for (int half = 0; half < 2; ++half) p_gain[half] = pow2_scale_into(sc.p_max[s.row(half)], 14);
#pragma unroll
    for (int nt = 0; nt < L::kPNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) mask[nt][e] *= p_gain[e >> 1];
  }
  if (warp == 0) {
    float h0_total = 0.f;
#pragma unroll
    for (int w = 0; w < L::kThreads / 32; ++w) h0_total += sc.warp[w];
    chunk_row_norms(sc.norm, sc.g, sc.quad, sc.fresh, h0_total, c.len);
  }
  __syncthreads();

  const RowConstants rc(sc.g, sc.norm, a.ridge, s);
  const float h_scale[2] = {rc.zeta[0] * h_unscale * p_gain[0], rc.zeta[1] * h_unscale * p_gain[1]};
  RowScale rows{{1.f, 1.f}, {1.f, 1.f}};
  const Rhs<L::kThreads> rhs{rhs_smem};
  Acc X, Xp;
  {
    Acc R;
    load_rows<T>(R, static_cast<const T*>(a.rhs), c, s);
    if constexpr (kF16) {
      add_row_dots(sc.rhs_sq, R, R, s);
      __syncthreads();
      rows.set(sc.rhs_sq, rc.lambda, p_gain, s);
    }
    rhs.set(R);
    chebyshev_start(X, Xp, R, rc);
  }
  chebyshev_iterate<true>(
      X, Xp, a.num_iter, a.ridge, rc,
      [&](Acc& Y, const Acc& x) { chunk_matvec<D, kSplit && !kF16, kF16>(Y, x, mask, h_scale, rows, s); },
      [&](Acc& R) { rhs.get(R); });
  store_rows<T>(static_cast<T*>(a.out), X, c, s);

  if constexpr (kBackward) {
    // X is the adjoint s: the per-row weights of the gate gradient need x·s and s·(H x).
    Acc xf, Y;
    load_rows<T>(xf, static_cast<const T*>(a.x), c, s);
    add_row_dots(sc.dot1, xf, X, s);
    if constexpr (kF16) {
      add_row_dots(sc.x_sq, xf, xf, s);
      __syncthreads();
      rows.set(sc.x_sq, {1.f, 1.f}, p_gain, s);
    }
    // (its barrier also publishes sc.dot1; the fp16 mode's backward forms this one product of x, whose part off the
    // keys' span is up to κ times the rest, as pairs: s·(H x) enters the gates' gradients through u)
    chunk_matvec<D, kSplit, kF16>(Y, xf, mask, h_scale, rows, s);
    add_row_dots(sc.dot2, X, Y, s);
    __syncthreads();
    if (warp == 0) adjoint_row_weights(a, bh, blockIdx.x, sc.g, sc.norm, sc.dot1, sc.dot2, c.len);
  }
#else
  __trap();  // launched only where wgmma_available()
#endif
}

template <int D, class T, bool kBackward, bool kSplit, class Op = bf16>
void launch(const IterateArgs& a, const ChebyshevDims& d) {
  constexpr auto kernel = iterate_wgmma_kernel<D, T, kBackward, kSplit, Op>;
  constexpr int kBytes = IterateSmem<D, kSplit>::kBytes;
  allow_dynamic_smem<kernel>(kBytes);
  const dim3 grid(unsigned(d.chunks()), unsigned(d.heads_total()));
  cuda::launch_dependent(kernel, grid, Layout<D>::kThreads, kBytes, a);
}

}  // namespace

void launch_iterate_wgmma(const IterateArgs& a, const ChebyshevDims& d, DType dtype) {
  if (d.f16_operands && d.precise_iterate && dtype == DType::F32) {
    with_dim(d.dim, [&](auto dim) {
      if (a.x != nullptr)
        launch<decltype(dim)::value, float, true, true, __half>(a, d);
      else
        launch<decltype(dim)::value, float, false, false, __half>(a, d);
    });
    return;
  }
  with_iterate_variant(d, dtype, a.x != nullptr, [&](auto dim, auto tag, auto backward, auto split) {
    launch<decltype(dim)::value, decltype(tag), decltype(backward)::value, decltype(split)::value>(a, d);
  });
}

}  // namespace primer::ops::cuda_ops::cheb
