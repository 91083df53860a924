// Hopper (sm_90a) flash attention backward with warpgroup MMA, warp-specialised. One CTA per (128-key tile, kv
// head, batch) of two consumer warpgroups and a producer warpgroup. Consumer warpgroup w owns keys 64w..64w+63 and
// keeps their dK and dV (64 x Dh each) in registers while query tiles (64 queries at head_dim 128, 128 at 64) of every
// query head of the GQA group stream through shared memory; so dK/dV are summed over the group without atomics and
// written once. Per query tile and consumer warpgroup:
//   S^T = K_w Q^T and dP^T = V_w dO^T                        (from shared memory)
//   P^T = exp2(S^T scale log2(e) - lse log2(e)),  dS^T = P^T (dP^T - delta) scale   (masked on edge tiles only)
//   dV += P^T dO and dK += dS^T Q                            (P^T, dS^T as register A fragments)
//   dQ  = dS K                                               (dS^T through shared memory)
// The warpgroups split dQ (by columns for 64 queries, by rows for 128), each reducing over all 128 keys, so that each
// query tile's dQ leaves a CTA once.
// dQ is staged in shared memory and added to the fp32 buffer by bulk tensor reduce-adds (TMA): not bitwise
// deterministic, like FlashAttention-2's atomics, but with far less load on the memory pipeline than per-thread
// atomics.
//
// Roles (FlashAttention-3's backward, Shah et al. 2024, and its hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp): the
// producer warpgroup gives its registers to the consumers (setmaxnreg). Its first warp loads K and V once and then
// each step's Q and dO (bulk tensor copies) and lse and delta (cp.async) into a stage, completing on the stage's
// "full" barrier once the consumers have released it ("empty"); its second warp adds each warpgroup's staged dQ into
// the buffer and tells the warpgroup when the staging may be written again. The consumers meet each other once per
// query tile, when both halves of dS^T are in shared memory (double-buffered, so no second barrier guards its
// reuse), and meet the producers only at mbarriers: no CTA-wide barrier in the loop.
//
// Two sources (B'MOJO-F's in-context and fading windows): the grid covers both sources' key tiles, each CTA with
// its source's keys, values, mask, queries and dQ buffer; dO, lse and delta are the merged softmax's, shared.
//
// At head_dim 128, dK and dV leave through shared memory (K's and V's tiles, free at the end) by bulk tensor stores:
// whole 128-byte lines, where each thread's own 4-byte stores used half of every sector and held the CTA (and the next
// one) longer.
//
// Schedule per consumer warpgroup: each issues the next tile's S^T right behind this tile's dQ, so the tensor cores run
// it while dQ is staged (at head_dim 64 behind dK too, which then follows dQ rather than dV); the next dP^T runs while
// the probabilities are computed.
#include "core/cuda_runtime.h"
#include "core/ops/cuda/attention_backward_common.cuh"
#include "core/ops/cuda/attention_tile_order.cuh"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/tile/named_barrier.cuh"
#include "core/ops/cuda/tile/tma.cuh"
#include "core/ops/cuda/tma_map.h"
#include "core/ops/cuda/tile/wgmma.cuh"

namespace primer::ops::cuda_ops::attn {
namespace {

using wgmma::advance;
using wgmma::k_major_step;
using wgmma::mn_major_step;
using wgmma::Sw128Tile;

template <int kDh> struct WgmmaBackwardTraits {
  // Two consumer warpgroups and a producer warpgroup: a whole warpgroup so that registers can move from it to the
  // consumers (setmaxnreg; the register file is split among the four schedulers).
  static constexpr int kBlockN = 128, kConsumers = 256, kThreads = 384, kStages = 2;
  // Query tiles of 64 at head_dim 128; of 128 at head_dim 64 (FlashAttention-3's hdim-64 tiles), where a step's
  // products with 64 queries take half as long as at 128 while what a step costs besides them (its barrier waits and
  // arrivals, the consumers' named barrier, the stage's loads and dQ's staging) does not shrink.
  static constexpr int kBlockM = kDh == 64 ? 128 : 64;
  static constexpr int kScores = kBlockM / 2;  // S^T and dP^T accumulators a thread holds (m64 x kBlockM)
  static constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;
  static_assert(kThreads == kConsumers + 128, "two consumer warpgroups and one producer warpgroup");
  static_assert((kProducerRegisters + 2 * kConsumerRegisters) * 32 <= 16384,
                "each scheduler's 16K registers hold one warp of each warpgroup");
  // dQ (kBlockM x kDh) is split between the consumer warpgroups, each reducing over all 128 keys: by columns when the
  // query tile is one wgmma row block of 64, by rows when it is two. Either way a warpgroup computes 64 rows.
  static constexpr bool kDqRowSplit = kBlockM == 128;
  static constexpr int kDqCols = kDqRowSplit ? kDh : kDh / 2;
  __host__ __device__ static constexpr int dq_row0(int w) { return kDqRowSplit ? 64 * w : 0; }
  __host__ __device__ static constexpr int dq_col0(int w) { return kDqRowSplit ? 0 : kDqCols * w; }
  using KTile = Sw128Tile<kBlockN, kDh>;      // K, V: [key][d]
  using QTile = Sw128Tile<kBlockM, kDh>;      // Q, dO: [query][d]
  using STile = Sw128Tile<kBlockN, kBlockM>;  // dS^T: [key][query]
  // dQ staging, per warpgroup its 64 rows as boxes of the dQ tensor map: [64 queries][32 fp32 columns] each. One
  // buffer of it: a second (measured 0.6-1.3% faster with head_dim 64's former 64-query tiles) does not fit beside
  // either kernel's tiles.
  static constexpr int kDqRows = 64;
  // dK += dS^T Q issued behind dQ rather than with dV, so that dQ's staging runs under dK and the next S^T: only at
  // head_dim 64, where its registers allow the next S^T in flight beside dK (at 128 ptxas would serialize the wgmmas).
  static constexpr bool kDkBehindDq = kDh == 64;
  static constexpr int kDqBoxes = kDqCols / 32, kDqBox = kDqRows * 32, kDqStage = kDqBoxes * kDqBox;
  static constexpr int kDqStaging = 2 * kDqStage;
  static_assert(kDqCols % 32 == 0, "a warpgroup's dQ columns are whole 32-column boxes");
  // The barriers: K and V landed; per stage full and empty; per consumer warpgroup, its dQ staged and its staging
  // free.
  static constexpr int kBarriers = 1 + 2 * kStages + 4;
  // K, V; the stages of Q and dO; two buffers of dS^T; dQ staging; the stages of lse and delta; the barriers; slack to
  // align to 1024 bytes.
  static constexpr int kSmemBytes =
      (2 * KTile::kElems + 2 * kStages * QTile::kElems + 2 * STile::kElems) * int(sizeof(bf16)) +
      (kDqStaging + 2 * kStages * kBlockM) * int(sizeof(float)) + kBarriers * 8 + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "within a Hopper block's shared memory");
};

#ifdef PRIMER_WGMMA
// 4-byte asynchronous copy; when !valid the destination is zero-filled and nothing is read.
__device__ __forceinline__ void cp_async_4(void* smem, const void* global, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(tile::smem_address(smem)), "l"(global),
               "r"(valid ? 4 : 0));
}
// An arrival on `bar` once this thread's earlier cp.async copies have landed; the barrier counts it among the
// arrivals it was initialised with (.noinc).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(tile::smem_address(bar)) : "memory");
}

// Offset of (row, col < 64) in a warpgroup's two staged dQ boxes: 128-byte rows whose 16-byte chunks are
// XOR-swizzled by row % 8, as the map's 128-byte swizzle expects.
__device__ __forceinline__ int staged_dq_offset(int row, int col) {
  return (col >> 5) * (64 * 32) + row * 32 + ((((col & 31) >> 2) ^ (row & 7)) << 2) + (col & 3);
}

// Stores a warpgroup's 64 x kCols dQ accumulators (element 4j + e: row 16 warp + g + 8 (e / 2), column 8j + 2t + e % 2)
// into its staging boxes. A 64-bit store is served a half-warp (rows g < 4 or g >= 4) at a time, and in the swizzle
// rows g and g ^ 1 put lanes t < 2 and t >= 2 into the same two chunks: a 2-way bank conflict. So lanes t >= 2 store
// column block j ^ 2 when the others store j: its chunks lie 4 further on (offset ^ 16), and each store's 16 lanes
// cover the 32 banks once.
template <int kCols>
__device__ __forceinline__ void stage_dq(float* staged, const float (&dq)[kCols / 2], int warp, int g, int t) {
  const bool swapped = t >= 2;
  const int flip = swapped ? 16 : 0;
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int jj = j ^ 2;
      const float2 v = swapped ? make_float2(dq[4 * jj + 2 * r], dq[4 * jj + 2 * r + 1])
                               : make_float2(dq[4 * j + 2 * r], dq[4 * j + 2 * r + 1]);
      *reinterpret_cast<float2*>(staged + (staged_dq_offset(16 * warp + g + 8 * r, 8 * j + 2 * t) ^ flip)) = v;
    }
}

// Sets the scores of a 64-key accumulator tile (kN / 4 groups of 8 queries) that the mask hides (or that lie past Tq
// / Tk) to -inf. Element 4j + e is query q0 + 8j + e % 2 (q0 = the tile's first query + 2t) and key k0 + 8 (e / 2).
template <int kN> __device__ __forceinline__ void hide_masked(float (&s)[kN], const Mask& mask, int q0, int k0) {
  const TileMask tile = mask.tile(q0, k0);
#pragma unroll
  for (int j = 0; j < kN / 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (tile.hidden(8 * j + (e & 1), 8 * (e >> 1))) s[4 * j + e] = -INFINITY;
}

// The A fragments (k-steps of 16 queries) of a 64-row accumulator, packed to bf16.
template <int kK> __device__ __forceinline__ void accumulators_to_a(uint32_t (&a)[kK][4], const float (&c)[8 * kK]) {
#pragma unroll
  for (int kk = 0; kk < kK; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) a[kk][i] = tile::pack_bf16(c[8 * kk + 2 * i], c[8 * kk + 2 * i + 1]);
}
#endif

// Tensor maps: each source's queries, keys, values, dQ buffer, dK and dV (the one-source kernel reads index 0 only),
// and dO.
struct BackwardMaps {
  CUtensorMap q[2], k[2], v[2], dq[2], dk[2], dv[2], dout;
};

template <int kDh, bool kTwoSources> __global__ void __launch_bounds__(WgmmaBackwardTraits<kDh>::kThreads, 1)
    attention_backward_wgmma_kernel(const __grid_constant__ BackwardArgs a0, const __grid_constant__ BackwardArgs a1,
                                    const __grid_constant__ BackwardMaps maps,
                                    const __grid_constant__ TileOrder order) {
  cuda::await_prior_grid();
#ifdef PRIMER_WGMMA
  using Tr = WgmmaBackwardTraits<kDh>;
  using KTile = typename Tr::KTile;
  using QTile = typename Tr::QTile;
  using STile = typename Tr::STile;
  constexpr int kBlockN = Tr::kBlockN, kBlockM = Tr::kBlockM, kStages = Tr::kStages;
  constexpr int kDqCols = Tr::kDqCols;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = wgmma::aligned_tiles(smem_raw);
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + KTile::kElems;
  bf16* sQ = sV + KTile::kElems;                                   // [kStages]
  bf16* sdO = sQ + kStages * QTile::kElems;                        // [kStages]
  bf16* sdS = sdO + kStages * QTile::kElems;                       // [2]: step s's in buffer s % 2
  float* sDq = reinterpret_cast<float*>(sdS + 2 * STile::kElems);  // 1024-byte aligned, as the 128-byte swizzle needs
  float* sLse = sDq + Tr::kDqStaging;                              // [kStages][kBlockM]
  float* sDelta = sLse + kStages * kBlockM;                        // [kStages][kBlockM]
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(sDelta + kStages * kBlockM);
  uint64_t* full = kv_full + 1;      // [kStages]: Q, dO, lse and delta landed
  uint64_t* empty = full + kStages;  // [kStages]: every consumer warp is done with the stage
  // [2]: warpgroup w's dQ staged, and its staging read by the reduce-adds; step s in phase s.
  uint64_t* dq_full = empty + kStages;
  uint64_t* dq_empty = dq_full + 2;

  // A row is a (key/value head, sequence) pair; its tiles [0, tiles0) are source 0's key tiles, the rest source 1's.
  // Causal: early keys feed the most queries, and each group of rows takes its tiles in index order, so these go
  // first and the light late key tiles fill the last wave.
  int tile, row;
  order.place(int(blockIdx.x), &tile, &row);
  const int tiles0 = kTwoSources ? (a0.mask.Tk + kBlockN - 1) / kBlockN : order.tiles;
  const bool second = kTwoSources && tile >= tiles0;
  const BackwardArgs& a = second ? a1 : a0;
  const int source = second ? 1 : 0;
  const int key_tile = second ? tile - tiles0 : tile;
  const int n0 = key_tile * kBlockN;
  const int kvh = row % a0.Hkv, b = row / a0.Hkv;
  const int warp_id = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Mask& mask = a.mask;

  int q_lo, q_hi;
  mask.query_range(n0, min(n0 + kBlockN, mask.Tk), &q_lo, &q_hi);
  const int tile_begin = q_lo / kBlockM, tiles = q_hi > q_lo ? (q_hi + kBlockM - 1) / kBlockM - tile_begin : 0;
  const int steps = tiles * a.group;  // (query head of the group, query tile) pairs
  // Steps run over the query tiles of each head of the group in turn; each role walks them with its own cursor, without
  // divisions. Step s uses stage s % kStages, the stage's barriers in phase s / kStages.
  struct Cursor {
    int stage, h, m0;
  };
  const int m0_begin = tile_begin * kBlockM, m0_end = m0_begin + tiles * kBlockM;
  auto next = [&](Cursor c) {
    c.stage = c.stage + 1 == kStages ? 0 : c.stage + 1;
    c.m0 += kBlockM;
    if (c.m0 == m0_end) c.m0 = m0_begin, ++c.h;
    return c;
  };
  auto parity = [](int step) { return (step / kStages) & 1; };
  const Cursor first{0, kvh * a.group, m0_begin};

  if (threadIdx.x == 0) {
    tma::barrier_init(kv_full, 1);
    for (int i = 0; i < kStages; ++i) {
      tma::barrier_init(&full[i], 1 + 32);  // the copies' issuer, and each lane's cp.async of lse and delta
      tma::barrier_init(&empty[i], 8);      // the consumer warps
    }
    for (int i = 0; i < 2; ++i) {
      tma::barrier_init(&dq_full[i], 4);  // the warpgroup's warps
      tma::barrier_init(&dq_empty[i], 1);
    }
    tma::fence_barrier_init();
  }
  __syncthreads();  // the last CTA-wide barrier: from here on the roles meet at mbarriers (the consumers also at named
                    // barriers of their own)

  if (warp_id >= 8) {  // the producer warpgroup
    wgmma::set_max_registers<Tr::kProducerRegisters, false>();
    if (warp_id == 8) {  // the loads
      if (lane == 0) {
        tma::arrive_expect_bytes(kv_full, 2 * KTile::kElems * int(sizeof(bf16)));
#pragma unroll
        for (int c = 0; c < kDh / 64; ++c) {
          tma::load_4d(sK + c * KTile::kBlockElems, &maps.k[source], kv_full, 64 * c, kvh, n0, b);
          tma::load_4d(sV + c * KTile::kBlockElems, &maps.v[source], kv_full, 64 * c, kvh, n0, b);
        }
      }
      Cursor cur = first;
      for (int step = 0; step < steps; ++step, cur = next(cur)) {
        const int stage = cur.stage;
        if (step >= kStages) tma::wait(&empty[stage], parity(step) ^ 1);  // the use kStages steps back
        if (lane == 0) {
          tma::arrive_expect_bytes(&full[stage], 2 * QTile::kElems * int(sizeof(bf16)));
#pragma unroll
          for (int c = 0; c < kDh / 64; ++c) {
            tma::load_4d(sQ + stage * QTile::kElems + c * QTile::kBlockElems, &maps.q[source], &full[stage], 64 * c,
                         cur.h, cur.m0, b);
            tma::load_4d(sdO + stage * QTile::kElems + c * QTile::kBlockElems, &maps.dout, &full[stage], 64 * c, cur.h,
                         cur.m0, b);
          }
        }
        const int64_t row_base = (int64_t(b) * a.Hq + cur.h) * mask.Tq;
#pragma unroll
        for (int i = lane; i < kBlockM; i += 32) {  // rows past Tq read as 0: finite, and masked out
          const int row = cur.m0 + i;
          const bool valid = row < mask.Tq;
          cp_async_4(sLse + stage * kBlockM + i, a.lse + row_base + (valid ? row : 0), valid);
          cp_async_4(sDelta + stage * kBlockM + i, a.delta + row_base + (valid ? row : 0), valid);
        }
        cp_async_arrive(&full[stage]);
      }
    } else if (warp_id == 9 && lane == 0) {  // dQ into the fp32 buffer, one bulk tensor reduce-add per box
      Cursor cur = first;
      for (int step = 0; step < steps; ++step, cur = next(cur))
        for (int w = 0; w < 2; ++w) {
          tma::wait(&dq_full[w], step & 1);
          const float* staged = sDq + w * Tr::kDqStage;
#pragma unroll
          for (int box = 0; box < Tr::kDqBoxes; ++box)  // rows past Tq are clipped
            tma::reduce_add_4d(&maps.dq[source], staged + box * Tr::kDqBox, Tr::dq_col0(w) + 32 * box, cur.h,
                               cur.m0 + Tr::dq_row0(w), b);
          tma::commit_bulk_group();
          tma::wait_bulk_groups<true>();
          tma::arrive(&dq_empty[w]);
        }
      tma::wait_bulk_groups<false>();
    }
    return;
  }

  wgmma::set_max_registers<Tr::kConsumerRegisters, true>();
  const int wg = warp_id / 4, warp = warp_id % 4, g = lane / 4, t = lane % 4;
  const int key0 = n0 + 64 * wg;  // this warpgroup's keys
  // Barrier 1: both consumer warpgroups (256 threads).
  constexpr int kConsumersMeet = 1;

  // S^T = K_w Q^T or dP^T = V_w dO^T from a stage: one commit group.
  auto issue_scores = [&](float(&acc)[Tr::kScores], const bf16* keys, const bf16* queries, int stage) {
    const uint64_t key_desc = wgmma::k_major<kBlockN, kDh>(keys, 64 * wg, 0);
    const uint64_t query_desc = wgmma::k_major<kBlockM, kDh>(queries + stage * QTile::kElems, 0, 0);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kDh / 16; ++kk)
      wgmma::wgmma_ss<0, 0>(acc, advance(key_desc, k_major_step<KTile>(16 * kk)),
                            advance(query_desc, k_major_step<QTile>(16 * kk)), kk > 0);
    wgmma::commit();
  };

  float dk[kDh / 2], dv[kDh / 2];
#pragma unroll
  for (int i = 0; i < kDh / 2; ++i) dk[i] = dv[i] = 0.f;
  float s[Tr::kScores], dp[Tr::kScores];
  tma::wait(kv_full, 0);
  if (steps > 0) {
    tma::wait(&full[0], 0);
    issue_scores(s, sK, sQ, 0);
  }

  Cursor cur = first;
  for (int step = 0; step < steps; ++step, cur = next(cur)) {
    const int stage = cur.stage, m0 = cur.m0;
    const bf16* tQ = sQ + stage * QTile::kElems;
    const bf16* tdO = sdO + stage * QTile::kElems;
    const float* lse = sLse + stage * kBlockM;
    const float* delta = sDelta + stage * kBlockM;
    bf16* tdS = sdS + (step & 1) * STile::kElems;

    // Accumulator element 4j + e: key my_key + 8 (e / 2), query m0 + 8j + 2t + e % 2.
    const int my_key = key0 + 16 * warp + g;
    wgmma::wait<0>();
    issue_scores(dp, sV, sdO, stage);
    wgmma::pin(s);
    if (!mask.tile_fully_visible(m0, kBlockM, key0, 64)) hide_masked(s, mask, m0 + 2 * t, my_key);
#pragma unroll
    for (int j = 0; j < kBlockM / 8; ++j) {
      const float2 l = *reinterpret_cast<const float2*>(lse + 8 * j + 2 * t);
      // A row that sees no key has lse = -inf and every score hidden: +inf keeps exp2(-inf - lse) at 0, not NaN.
      const float l2[2] = {l.x == -INFINITY ? INFINITY : l.x * kLog2e, l.y == -INFINITY ? INFINITY : l.y * kLog2e};
#pragma unroll
      for (int e = 0; e < 4; ++e) s[4 * j + e] = exp2f(fmaf(s[4 * j + e], a.scale_log2, -l2[e & 1]));
    }
    wgmma::wait<0>();
    wgmma::pin(dp);
#pragma unroll
    for (int j = 0; j < kBlockM / 8; ++j) {
      const float2 dl = *reinterpret_cast<const float2*>(delta + 8 * j + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[4 * j + e] = s[4 * j + e] * (dp[4 * j + e] - ((e & 1) ? dl.y : dl.x)) * a.scale;
    }

    // dV += P^T dO and dK += dS^T Q (reduction over the tile's queries).
    uint32_t pa[kBlockM / 16][4], dsa[kBlockM / 16][4];
    accumulators_to_a(pa, s);
    accumulators_to_a(dsa, dp);
    const uint64_t do_mn = wgmma::mn_major<kBlockM, kDh>(tdO, 0, 0), q_mn = wgmma::mn_major<kBlockM, kDh>(tQ, 0, 0);
    auto issue_dk = [&] {
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk)
        wgmma::wgmma_rs<1>(dk, dsa[kk], advance(q_mn, mn_major_step(16 * kk)), 1);
    };
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) wgmma::wgmma_rs<1>(dv, pa[kk], advance(do_mn, mn_major_step(16 * kk)), 1);
    if (!Tr::kDkBehindDq) issue_dk();
    wgmma::commit();
    wgmma::pin(dv);
    wgmma::pin(dk);

    // dS^T to its buffer (fragment kk, register i holds key row 8 (i % 2), queries 16kk + 8 (i / 2) + 2t). The
    // buffer's last readers, step - 2's dQ products, finished before either warpgroup met the other at step - 1.
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        *reinterpret_cast<uint32_t*>(
            tdS + STile::offset(64 * wg + 16 * warp + g + 8 * (i & 1), 16 * kk + 8 * (i >> 1) + 2 * t)) = dsa[kk][i];
    wgmma::fence_shared_for_async();
    tile::barrier_sync(kConsumersMeet, Tr::kConsumers);  // both halves of dS^T are in shared memory

    // dQ = dS K over all 128 keys, this warpgroup's 64 rows and kDqCols columns ...
    float dq[kDqCols / 2];
    const uint64_t ds_mn = wgmma::mn_major<kBlockN, kBlockM>(tdS, 0, Tr::dq_row0(wg));
    const uint64_t k_mn = wgmma::mn_major<kBlockN, kDh>(sK, 0, Tr::dq_col0(wg));
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      wgmma::wgmma_ss<1, 1>(dq, advance(ds_mn, mn_major_step(16 * kk)), advance(k_mn, mn_major_step(16 * kk)), kk > 0);
    wgmma::commit();
    if (Tr::kDkBehindDq) {
      issue_dk();
      wgmma::commit();
    }
    // dV (and dK where it went with dV) done, their A fragments free, before the next step's S^T is issued behind dQ
    // (and dK); its dP^T is issued at the top of the next step, so that only one of the two is held while dQ is. (A
    // wait that leaves a group in flight across the loop's back edge would make the compiler serialize the wgmmas:
    // the top waits for all.)
    wgmma::wait<1>();
    wgmma::pin(dv);
    wgmma::pin(dk);
    wgmma::pin(dq);
    // The stage is released once its Q and dO are read: now, or after dK behind dQ.
    auto release_stage = [&] {
      __syncwarp();  // the warp's reads of the stage's lse and delta, too
      if (lane == 0) tma::arrive(&empty[stage]);
    };
    if (!Tr::kDkBehindDq) release_stage();
    // Issued unconditionally (past the last step it reads a stale stage and is discarded): accumulators that are
    // defined on only some paths would make the compiler serialize the wgmmas.
    const int next_stage = next(cur).stage;
    if (step + 1 < steps) tma::wait(&full[next_stage], parity(step + 1));
    issue_scores(s, sK, sQ, next_stage);
    if (!Tr::kDkBehindDq) {
      wgmma::wait<1>();
      wgmma::pin(dq);
    }

    // dQ to this warpgroup's staging boxes once the reduce-adds of the step before have read them; the producer's
    // second warp adds them.
    if (step > 0) tma::wait(&dq_empty[wg], (step - 1) & 1);
    stage_dq<kDqCols>(sDq + wg * Tr::kDqStage, dq, warp, g, t);
    wgmma::fence_shared_for_async();
    __syncwarp();
    if (lane == 0) tma::arrive(&dq_full[wg]);
    if (Tr::kDkBehindDq) {
      wgmma::wait<1>();  // dK
      wgmma::pin(dk);
      release_stage();
    }
  }
  wgmma::wait<0>();

  // dK and dV, element 4j + e: key row 16 warp + g + 8 (e / 2) of this warpgroup's 64, column 8j + 2t + e % 2: through
  // K's and V's tiles and one bulk tensor store per 64-column block (rows past Tk are clipped).
  tile::barrier_sync(kConsumersMeet, Tr::kConsumers);  // both warpgroups' products (dQ reads all of K) are done
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = 64 * wg + 16 * warp + g + 8 * r;
#pragma unroll
    for (int j = 0; j < kDh / 8; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(sK + KTile::offset(row, 8 * j + 2 * t)) =
          __floats2bfloat162_rn(dk[4 * j + 2 * r], dk[4 * j + 2 * r + 1]);
      *reinterpret_cast<__nv_bfloat162*>(sV + KTile::offset(row, 8 * j + 2 * t)) =
          __floats2bfloat162_rn(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
    }
  }
  wgmma::fence_shared_for_async();
  tile::barrier_sync(kConsumersMeet, Tr::kConsumers);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int c = 0; c < kDh / 64; ++c) {
      tma::store_4d(&maps.dk[source], sK + c * KTile::kBlockElems, 64 * c, kvh, n0, b);
      tma::store_4d(&maps.dv[source], sV + c * KTile::kBlockElems, 64 * c, kvh, n0, b);
    }
    tma::commit_bulk_group();
    tma::wait_bulk_groups<true>();  // read out of shared memory before the CTA exits
  }
#else
  __trap();  // launched only where wgmma_available()
#endif
}

// a1: source 1's arguments (the two-source kernel only; dout, lse and delta as a0's).
template <int kDh, bool kTwoSources> void launch_wgmma(const BackwardArgs& a0, const BackwardArgs& a1, int B) {
  using Tr = WgmmaBackwardTraits<kDh>;
  constexpr auto kernel = attention_backward_wgmma_kernel<kDh, kTwoSources>;
  allow_dynamic_smem<kernel>(Tr::kSmemBytes);
  BackwardMaps maps;
  for (int s = 0; s < 2; ++s) {
    const BackwardArgs& a = s == 1 && kTwoSources ? a1 : a0;
    maps.q[s] = token_head_tensor_map(a.q, B, a.mask.Tq, a.Hq, kDh, Tr::kBlockM);
    maps.k[s] = token_head_tensor_map(a.k, B, a.mask.Tk, a.Hkv, kDh, Tr::kBlockN);
    maps.v[s] = token_head_tensor_map(a.v, B, a.mask.Tk, a.Hkv, kDh, Tr::kBlockN);
    // dQ is reduced into dq_accum [B, Tq, Hq, Dh] fp32 in boxes of [64 queries][32 columns].
    maps.dq[s] =
        token_head_tensor_map(a.dq_accum, B, a.mask.Tq, a.Hq, kDh, Tr::kDqRows, CU_TENSOR_MAP_DATA_TYPE_FLOAT32);
    maps.dk[s] = token_head_tensor_map(a.dk, B, a.mask.Tk, a.Hkv, kDh, Tr::kBlockN);
    maps.dv[s] = token_head_tensor_map(a.dv, B, a.mask.Tk, a.Hkv, kDh, Tr::kBlockN);
  }
  maps.dout = token_head_tensor_map(a0.dout, B, a0.mask.Tq, a0.Hq, kDh, Tr::kBlockM);
  auto key_tiles = [](const BackwardArgs& a) { return (a.mask.Tk + Tr::kBlockN - 1) / Tr::kBlockN; };
  // What a row's CTAs stream: for each query head of the group, its queries, output gradients and fp32 dQ.
  auto row_bytes = [](const BackwardArgs& a) { return int64_t(a.group) * a.mask.Tq * kDh * (2 + 2 + 4); };
  const TileOrder order = grouped_tile_order(key_tiles(a0) + (kTwoSources ? key_tiles(a1) : 0), a0.Hkv * B,
                                             row_bytes(a0) + (kTwoSources ? row_bytes(a1) : 0));
  cuda::launch_dependent(kernel, dim3(order.blocks()), Tr::kThreads, Tr::kSmemBytes, a0, a1, maps, order);
}

}  // namespace

void launch_backward_wgmma(const BackwardArgs& a, int B, int Dh) {
  if (Dh == 64)
    launch_wgmma<64, false>(a, a, B);
  else
    launch_wgmma<128, false>(a, a, B);
}

void launch_backward_two_sources_wgmma(const BackwardArgs& a0, const BackwardArgs& a1, int B, int Dh) {
  if (Dh == 64)
    launch_wgmma<64, true>(a0, a1, B);
  else
    launch_wgmma<128, true>(a0, a1, B);
}

}  // namespace primer::ops::cuda_ops::attn
