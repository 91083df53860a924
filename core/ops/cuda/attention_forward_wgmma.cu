// FlashAttention forward for Hopper: one CTA of two warpgroups per (128-query tile, head, batch); each warpgroup
// owns 64 query rows. S = Q K^T is one wgmma chain with Q and K in shared memory, the online softmax runs on its
// accumulators in registers, and O += P V takes P straight from registers (wgmma's register-A form) with V read
// MN-major from shared memory. Q and the K/V tiles of 128 keys arrive by bulk tensor copies (TMA) that one thread
// issues, two stages deep; tiles the mask hides entirely are never loaded, and only tiles crossing the mask's
// edge pay for per-element masking. The two warpgroups take turns issuing their products (ping-pong), so one's
// softmax runs under the other's matrix products. O leaves through shared memory (Q's tile) by one bulk tensor store.
//
// The two-source kernel (B'MOJO-F's in-context and fading windows) walks the key tiles of source 0 and then those of
// source 1, each with its own maps and mask (and its own queries where the sources do not share them), through the
// same pipeline and the same online softmax: one softmax over the union, q read once, out and lse written once.
#include <cmath>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/ops/cuda/attention_forward_wgmma.h"
#include "core/ops/cuda/attention_mask.cuh"
#include "core/ops/cuda/attention_tile_order.cuh"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/tile/named_barrier.cuh"
#include "core/ops/cuda/tile/tma.cuh"
#include "core/ops/cuda/tma_map.h"
#include "core/ops/cuda/tile/wgmma.cuh"
#include "core/ops/cuda/wgmma_available.h"

namespace primer::ops::cuda_ops {
namespace {

using tile::bf16;
constexpr float kLog2e = 1.4426950408889634f;

struct ForwardArgs {
  bf16* out;
  float* lse;
  int Hq, Hkv, group;
  float scale_log2;   // softmax runs in base 2: exp(x * scale) = exp2(x * scale * log2(e))
  attn::Mask mask0;   // source 0's mask
  attn::Mask mask1;   // source 1's (the two-source kernel only); Tq equal to mask0's
  bool own_queries1;  // source 1 has its own queries (else it reads source 0's)
};

// The tensor maps of the queries, keys and values of each source (the one-source kernel reads index 0 only), and of
// the output.
struct ForwardMaps {
  CUtensorMap q[2], k[2], v[2], out;
};

template <int kDh, bool kTwoSources> struct Traits {
  // Two consumer warpgroups (64 query rows each) and a producer warpgroup, one thread of which issues the copies:
  // a whole warpgroup so that registers can move from it to the consumers (setmaxnreg; the register file is split
  // among the four schedulers, so an odd extra warp would cap every thread at 168).
  // Key tiles of 192 at head_dim 64, whose steps' products are half as long as at 128: the per-step costs (the
  // turn-taking, the waits, O's rescaling) then weigh on fewer steps.
  static constexpr int kBlockM = 128, kBlockN = kDh == 64 ? 192 : 128, kConsumerWarps = 8, kThreads = 384;
  static constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;
  static_assert(kThreads == 32 * kConsumerWarps + 128, "two consumer warpgroups and one producer warpgroup");
  static_assert((kProducerRegisters + 2 * kConsumerRegisters) * 32 <= 16384,
                "each scheduler's 16K registers hold one warp of each warpgroup");
  using QTile = wgmma::Sw128Tile<kBlockM, kDh>;
  using KvTile = wgmma::Sw128Tile<kBlockN, kDh>;
  static constexpr int kQTiles = kTwoSources ? 2 : 1;  // source 1's own queries, when it has them
  // Q (per source), two stages of K and of V, nine barriers (Q full; K and V full and empty per stage), and room to
  // align the base to the 1024 bytes swizzle atoms need.
  static constexpr int kSmemBytes = (kQTiles * QTile::kElems + 4 * KvTile::kElems) * int(sizeof(bf16)) + 9 * 8 + 1024;
};

// Online softmax of one tile's raw scores s (this thread's rows g and g + 8 of its warp): masks the tile if it
// crosses the mask's edge, updates the running max and sum, turns s into unnormalised probabilities
// p = exp2(s * scale_log2 - max * scale_log2) (one FFMA and one EX2 each) and returns in correction[r] the factor
// exp2((old max - new max) * scale_log2) that what was accumulated so far must be multiplied by.
template <int kBlockN> __device__ __forceinline__ void online_softmax(float (&s)[kBlockN / 2], float (&row_max)[2],
                                                                      float (&row_sum)[2], float (&correction)[2],
                                                                      const attn::Mask& mask, int rows0, int row0,
                                                                      int n0, int t, float scale_log2) {
  if (!mask.tile_fully_visible(rows0, 64, n0, kBlockN)) {
    const attn::TileMask tile = mask.tile(row0, n0 + 2 * t);  // element 4j + e: row (e / 2) 8, key 8j + e % 2
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (tile.hidden((e >> 1) * 8, j * 8 + (e & 1))) s[4 * j + e] = -INFINITY;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = row_max[r];
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float base = mx == -INFINITY ? 0.f : mx * scale_log2;  // a row with nothing visible stays at zero
    correction[r] = exp2f(row_max[r] * scale_log2 - base);
    row_max[r] = mx;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      s[4 * j + 2 * r] = exp2f(fmaf(s[4 * j + 2 * r], scale_log2, -base));
      s[4 * j + 2 * r + 1] = exp2f(fmaf(s[4 * j + 2 * r + 1], scale_log2, -base));
      sum += s[4 * j + 2 * r] + s[4 * j + 2 * r + 1];
    }
    row_sum[r] = row_sum[r] * correction[r] + sum;
  }
}

// Probabilities as bf16 register A fragments of O += P V (k-step kk covers keys 16kk .. 16kk + 15).
template <int kBlockN>
__device__ __forceinline__ void pack_probabilities(uint32_t (&p)[kBlockN / 16][4], const float (&s)[kBlockN / 2]) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) p[kk][i] = tile::pack_bf16(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
}

// The pipeline. A producer warp streams Q, then K and V tiles into two stages each, waiting for a stage's "empty"
// barrier (every consumer warp has finished reading it) before refilling it. Per consumer warpgroup: while
// O += P_j V_j runs on the tensor cores, the scores of tile j + 1 (issued just before it) go through the softmax.
// The warpgroups take turns issuing their products, so one's softmax overlaps the other's products. A step is one key
// tile: source 0's tiles, then (two sources) source 1's.
template <int kDh, bool kTwoSources> __global__ void __launch_bounds__(Traits<kDh, kTwoSources>::kThreads, 1)
    attention_forward_wgmma_kernel(const __grid_constant__ ForwardArgs a, const __grid_constant__ ForwardMaps maps,
                                   const __grid_constant__ attn::TileOrder order) {
  cuda::await_prior_grid();
#ifdef PRIMER_WGMMA
  using Tr = Traits<kDh, kTwoSources>;
  constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN;
  constexpr int kKvElems = Tr::KvTile::kElems;
  extern __shared__ unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  bf16* sK = sQ + Tr::kQTiles * Tr::QTile::kElems;  // [2] stages
  bf16* sV = sK + 2 * kKvElems;                     // [2] stages
  uint64_t* q_full = reinterpret_cast<uint64_t*>(sV + 2 * kKvElems);
  uint64_t* k_full = q_full + 1;    // [2]
  uint64_t* v_full = k_full + 2;    // [2]
  uint64_t* k_empty = v_full + 2;   // [2]
  uint64_t* v_empty = k_empty + 2;  // [2]

  const int Tq = a.mask0.Tq;
  // A row is a (query head, sequence) pair; each group of rows takes its query tiles longest causal rows first.
  int tile, row;
  order.place(int(blockIdx.x), &tile, &row);
  const int m0 = (order.tiles - 1 - tile) * kBlockM;
  const int h = row % a.Hq, b = row / a.Hq, kvh = h / a.group;
  const int warp_id = threadIdx.x / 32, lane = threadIdx.x % 32;

  // Each source's key tiles [begin, begin + count) that the query tile reaches.
  auto tiles_of = [&](const attn::Mask& mask, int* begin, int* count) {
    int key_lo, key_hi;
    mask.key_range(m0, min(m0 + kBlockM, Tq), &key_lo, &key_hi);
    *begin = key_lo / kBlockN;
    *count = key_hi > key_lo ? (key_hi + kBlockN - 1) / kBlockN - *begin : 0;
  };
  int begin0, count0, begin1 = 0, count1 = 0;
  tiles_of(a.mask0, &begin0, &count0);
  if constexpr (kTwoSources) tiles_of(a.mask1, &begin1, &count1);
  const int steps = count0 + count1;
  auto second = [&](int step) { return kTwoSources && step >= count0; };  // step's tile is source 1's
  auto tile_of = [&](int step) { return second(step) ? begin1 + step - count0 : begin0 + step; };
  // Step i's K and V live in stage i % 2; each use of a stage is one phase of its barriers.
  auto stage = [](int step) { return step & 1; };
  auto parity = [](int step) { return (step >> 1) & 1; };
  const bool own_queries1 = kTwoSources && a.own_queries1;

  if (threadIdx.x == 0) {
    tma::barrier_init(q_full, 1);
    for (int i = 0; i < 2; ++i) {
      tma::barrier_init(&k_full[i], 1);
      tma::barrier_init(&v_full[i], 1);
      tma::barrier_init(&k_empty[i], Tr::kConsumerWarps);
      tma::barrier_init(&v_empty[i], Tr::kConsumerWarps);
    }
    tma::fence_barrier_init();
  }
  __syncthreads();  // the last CTA-wide barrier: from here on producer and consumers meet only at mbarriers

  if (warp_id >= Tr::kConsumerWarps) {  // the producer warpgroup
    wgmma::set_max_registers<Tr::kProducerRegisters, false>();
    if (warp_id != Tr::kConsumerWarps || lane != 0 || steps == 0) return;
    auto load = [&](const CUtensorMap(&source_maps)[2], bf16* stages, uint64_t* full, uint64_t* empty, int step) {
      if (step >= 2) tma::wait(&empty[stage(step)], parity(step) ^ 1);  // the use two steps back
      bf16* dst = stages + stage(step) * kKvElems;
      const CUtensorMap* map = &source_maps[second(step) ? 1 : 0];
      tma::arrive_expect_bytes(&full[stage(step)], kKvElems * int(sizeof(bf16)));
#pragma unroll
      for (int c = 0; c < kDh / 64; ++c)
        tma::load_4d(dst + c * Tr::KvTile::kBlockElems, map, &full[stage(step)], 64 * c, kvh, tile_of(step) * kBlockN,
                     b);
    };
    tma::arrive_expect_bytes(q_full, (own_queries1 ? 2 : 1) * Tr::QTile::kElems * int(sizeof(bf16)));
    for (int source = 0; source < (own_queries1 ? 2 : 1); ++source)
#pragma unroll
      for (int c = 0; c < kDh / 64; ++c)
        tma::load_4d(sQ + source * Tr::QTile::kElems + c * Tr::QTile::kBlockElems, &maps.q[source], q_full, 64 * c, h,
                     m0, b);
    load(maps.k, sK, k_full, k_empty, 0);
    for (int step = 0; step < steps; ++step) {  // the consumers' order: K_{j+1} with V_j
      if (step + 1 < steps) load(maps.k, sK, k_full, k_empty, step + 1);
      load(maps.v, sV, v_full, v_empty, step);
    }
    return;
  }

  wgmma::set_max_registers<Tr::kConsumerRegisters, true>();
  const int wg = warp_id / 4, warp = warp_id % 4, g = lane / 4, t = lane % 4;
  const int wg_m0 = m0 + 64 * wg, row0 = wg_m0 + warp * 16 + g;
  float o[kDh / 2] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};  // raw scores; rows g and g + 8 of this warp
  if (steps > 0) {
    auto release = [&](uint64_t* empty, int step) {
      if (lane == 0) tma::arrive(&empty[stage(step)]);
    };
    auto scores = [&](float(&s)[kBlockN / 2], int step) {  // S = Q K^T, issued and committed
      const bf16* queries = own_queries1 && second(step) ? sQ + Tr::QTile::kElems : sQ;
#pragma unroll
      for (int kk = 0; kk < kDh / 16; ++kk)
        wgmma::wgmma_ss<0, 0>(s, wgmma::k_major<kBlockM, kDh>(queries, 64 * wg, kk * 16),
                              wgmma::k_major<kBlockN, kDh>(sK + stage(step) * kKvElems, 0, kk * 16), kk > 0);
      wgmma::commit();
    };
    auto accumulate_values = [&](const uint32_t(&p)[kBlockN / 16][4], int step) {  // O += P V, issued, committed
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
        wgmma::wgmma_rs<1>(o, p[kk], wgmma::mn_major<kBlockN, kDh>(sV + stage(step) * kKvElems, kk * 16, 0), 1);
      wgmma::commit();
    };
    auto softmax = [&](float(&s)[kBlockN / 2], float(&correction)[2], int step) {
      online_softmax<kBlockN>(s, row_max, row_sum, correction, second(step) ? a.mask1 : a.mask0, wg_m0, row0,
                              tile_of(step) * kBlockN, t, a.scale_log2);
    };

    tma::wait(q_full, 0);
    tma::wait(&k_full[stage(0)], parity(0));
    float s[kBlockN / 2], correction[2];
    uint32_t p[kBlockN / 16][4];
    // Ping-pong (FlashAttention-3, Shah et al. 2024, §3.1): the warpgroups take turns issuing their products (named
    // barrier 1 + w is warpgroup w's turn), so that one's softmax runs while the other's products hold the tensor
    // cores. Warpgroup 1 lets 0 go first; each issue hands the turn over, but for warpgroup 1's last.
    auto my_turn = [&] { tile::barrier_sync(1 + wg, 256); };
    auto your_turn = [&] { tile::barrier_arrive(2 - wg, 256); };
    if (wg == 1) your_turn();
    my_turn();
    wgmma::fence();
    scores(s, 0);
    your_turn();
    wgmma::wait<0>();
    wgmma::pin(s);
    release(k_empty, 0);
    softmax(s, correction, 0);
    pack_probabilities<kBlockN>(p, s);

    // Every iteration but the last overlaps the next tile's softmax with this tile's P V (no branch around the
    // wgmma issue: the compiler then keeps the products asynchronous).
    for (int step = 0; step + 1 < steps; ++step) {
      tma::wait(&k_full[stage(step + 1)], parity(step + 1));
      tma::wait(&v_full[stage(step)], parity(step));
      my_turn();
      wgmma::fence();
      scores(s, step + 1);
      accumulate_values(p, step);
      your_turn();
      wgmma::wait<1>();
      wgmma::pin(s);
      release(k_empty, step + 1);
      softmax(s, correction, step + 1);
      wgmma::wait<0>();
      wgmma::pin(o);
      wgmma::pin(p);
      release(v_empty, step);
#pragma unroll
      for (int d = 0; d < kDh / 8; ++d)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[4 * d + e] *= correction[e >> 1];
      pack_probabilities<kBlockN>(p, s);
    }
    tma::wait(&v_full[stage(steps - 1)], parity(steps - 1));
    my_turn();
    wgmma::fence();
    accumulate_values(p, steps - 1);
    if (wg == 0) your_turn();
    wgmma::wait<0>();
    wgmma::pin(o);
  }

  // O into this warpgroup's rows of Q's tile (only its own products read them, and they are done), then one bulk
  // tensor store of the tile once both warpgroups' rows are there (rows past Tq are clipped).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = sum > 0 ? 1.f / sum : 0.f;
    const int tile_row = 64 * wg + warp * 16 + g + 8 * r;
#pragma unroll
    for (int d = 0; d < kDh / 8; ++d)
      *reinterpret_cast<__nv_bfloat162*>(sQ + Tr::QTile::offset(tile_row, d * 8 + 2 * t)) =
          __floats2bfloat162_rn(o[4 * d + 2 * r] * inv, o[4 * d + 2 * r + 1] * inv);
    const int row = row0 + 8 * r;
    if (t == 0 && row < Tq)
      a.lse[(int64_t(b) * a.Hq + h) * Tq + row] =
          sum > 0 ? (row_max[r] * a.scale_log2 + log2f(sum)) / kLog2e : -INFINITY;
  }
  wgmma::fence_shared_for_async();
  tile::barrier_sync(3, 32 * Tr::kConsumerWarps);  // the consumers only: the producer warpgroup has returned
  if (threadIdx.x == 0) {
#pragma unroll
    for (int c = 0; c < kDh / 64; ++c) tma::store_4d(&maps.out, sQ + c * Tr::QTile::kBlockElems, 64 * c, h, m0, b);
    tma::commit_bulk_group();
    tma::wait_bulk_groups<true>();  // read out of shared memory before the CTA exits
  }
#endif  // PRIMER_WGMMA
}

// Source s reads queries q[s], keys k[s], values v[s] under dims d[s] (the one-source kernel: s = 0 only).
template <int kDh, bool kTwoSources> void launch(const ForwardArgs& a, const void* const (&q)[2],
                                                 const void* const (&k)[2], const void* const (&v)[2],
                                                 const AttentionDims (&d)[2]) {
  using Tr = Traits<kDh, kTwoSources>;
  constexpr auto kernel = attention_forward_wgmma_kernel<kDh, kTwoSources>;
  allow_dynamic_smem<kernel>(Tr::kSmemBytes);
  const int B = int(d[0].B);
  ForwardMaps maps;
  for (int s = 0; s < (kTwoSources ? 2 : 1); ++s) {
    maps.q[s] = token_head_tensor_map(q[s], B, d[s].Tq, d[s].Hq, kDh, Tr::kBlockM);
    maps.k[s] = token_head_tensor_map(k[s], B, d[s].Tk, d[s].Hkv, kDh, Tr::kBlockN);
    maps.v[s] = token_head_tensor_map(v[s], B, d[s].Tk, d[s].Hkv, kDh, Tr::kBlockN);
  }
  if (!kTwoSources) maps.q[1] = maps.q[0], maps.k[1] = maps.k[0], maps.v[1] = maps.v[0];
  maps.out = token_head_tensor_map(a.out, B, d[0].Tq, d[0].Hq, kDh, Tr::kBlockM);
  // What a row's CTAs stream: the keys and values of each source, shared by the group's query heads (adjacent rows).
  int64_t row_bytes = 0;
  for (int s = 0; s < (kTwoSources ? 2 : 1); ++s) row_bytes += d[s].Tk * kDh * 4 / a.group;
  const attn::TileOrder order =
      attn::grouped_tile_order(int((a.mask0.Tq + Tr::kBlockM - 1) / Tr::kBlockM), a.Hq * B, row_bytes);
  cuda::launch_dependent(kernel, dim3(order.blocks()), Tr::kThreads, Tr::kSmemBytes, a, maps, order);
}

template <bool kTwoSources> void forward(void* out, float* lse, const void* const (&q)[2], const void* const (&k)[2],
                                         const void* const (&v)[2], const AttentionDims (&d)[2]) {
  const ForwardArgs a{static_cast<bf16*>(out),
                      lse,
                      int(d[0].Hq),
                      int(d[0].Hkv),
                      int(d[0].Hq / d[0].Hkv),
                      d[0].scale * kLog2e,
                      attn::Mask::of(d[0]),
                      attn::Mask::of(d[kTwoSources ? 1 : 0]),
                      kTwoSources && q[1] != q[0]};
  if (d[0].Dh == 64)
    launch<64, kTwoSources>(a, q, k, v, d);
  else
    launch<128, kTwoSources>(a, q, k, v, d);
}

}  // namespace

void attention_forward_wgmma(void* out, float* lse, const void* q, const void* k, const void* v,
                             const AttentionDims& d) {
  forward<false>(out, lse, {q, q}, {k, k}, {v, v}, {d, d});
}

void attention_forward_two_sources(void* out, float* lse, const AttentionSource (&sources)[2]) {
  PRIMER_CHECK(wgmma_available(), "attention_forward_two_sources: needs the Hopper (wgmma) kernels");
  const AttentionSource &s0 = sources[0], &s1 = sources[1];
  forward<true>(out, lse, {s0.q, s1.q}, {s0.k, s1.k}, {s0.v, s1.v}, {s0.dims, s1.dims});
}

}  // namespace primer::ops::cuda_ops
