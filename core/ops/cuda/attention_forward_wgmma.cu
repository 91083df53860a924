// FlashAttention forward for Hopper: one CTA of two warpgroups per (128-query tile, head, batch); each warpgroup
// owns 64 query rows. S = Q K^T is one wgmma chain with Q and K in shared memory, the online softmax runs on its
// accumulators in registers, and O += P V takes P straight from registers (wgmma's register-A form) with V read
// MN-major from shared memory. Q and the K/V tiles of 128 keys arrive by bulk tensor copies (TMA) that one thread
// issues, two stages deep; tiles the mask hides entirely are never loaded, and only tiles crossing the mask's
// edge pay for per-element masking.
#include <cmath>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/attention_forward_wgmma.h"
#include "core/ops/cuda/attention_mask.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/tile/tma.cuh"
#include "core/ops/cuda/tma_map.h"
#include "core/ops/cuda/tile/wgmma.cuh"

namespace primer::ops::cuda_ops {
namespace {

using tile::bf16;
constexpr float kLog2e = 1.4426950408889634f;

struct ForwardArgs {
  bf16* out;
  float* lse;
  int Hq, Hkv, group;
  float scale_log2;  // softmax runs in base 2: exp(x * scale) = exp2(x * scale * log2(e))
  attn::Mask mask;
};

template <int kDh> struct Traits {
  // Two consumer warpgroups (64 query rows each) and a producer warpgroup, one thread of which issues the copies:
  // a whole warpgroup so that registers can move from it to the consumers (setmaxnreg; the register file is split
  // among the four schedulers, so an odd extra warp would cap every thread at 168).
  static constexpr int kBlockM = 128, kBlockN = 128, kConsumerWarps = 8, kThreads = 384;
  static constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;
  static_assert(kThreads == 32 * kConsumerWarps + 128, "two consumer warpgroups and one producer warpgroup");
  static_assert((kProducerRegisters + 2 * kConsumerRegisters) * 32 <= 16384,
                "each scheduler's 16K registers hold one warp of each warpgroup");
  using QTile = wgmma::Sw128Tile<kBlockM, kDh>;
  using KvTile = wgmma::Sw128Tile<kBlockN, kDh>;
  // Q, two stages of K and of V, nine barriers (Q full; K and V full and empty per stage), and room to align the
  // base to the 1024 bytes swizzle atoms need.
  static constexpr int kSmemBytes = (QTile::kElems + 4 * KvTile::kElems) * int(sizeof(bf16)) + 9 * 8 + 1024;
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
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (!mask.visible(row0 + (e >> 1) * 8, n0 + j * 8 + 2 * t + (e & 1))) s[4 * j + e] = -INFINITY;
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
// The warpgroups never wait for each other, so one's softmax overlaps the other's products.
template <int kDh> __global__ void __launch_bounds__(Traits<kDh>::kThreads, 1)
    attention_forward_wgmma_kernel(ForwardArgs a, const __grid_constant__ CUtensorMap q_map,
                                   const __grid_constant__ CUtensorMap k_map,
                                   const __grid_constant__ CUtensorMap v_map) {
#ifdef PRIMER_WGMMA
  using Tr = Traits<kDh>;
  constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN;
  constexpr int kKvElems = Tr::KvTile::kElems;
  extern __shared__ unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  bf16* sK = sQ + Tr::QTile::kElems;  // [2] stages
  bf16* sV = sK + 2 * kKvElems;       // [2] stages
  uint64_t* q_full = reinterpret_cast<uint64_t*>(sV + 2 * kKvElems);
  uint64_t* k_full = q_full + 1;    // [2]
  uint64_t* v_full = k_full + 2;    // [2]
  uint64_t* k_empty = v_full + 2;   // [2]
  uint64_t* v_empty = k_empty + 2;  // [2]

  const int m0 = (gridDim.x - 1 - blockIdx.x) * kBlockM;  // longest causal rows first
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / a.group;
  const int warp_id = threadIdx.x / 32, lane = threadIdx.x % 32;
  const attn::Mask& mask = a.mask;

  int key_lo, key_hi;
  mask.key_range(m0, min(m0 + kBlockM, mask.Tq), &key_lo, &key_hi);
  const int tile_begin = key_lo / kBlockN, tile_end = key_hi > key_lo ? (key_hi + kBlockN - 1) / kBlockN : tile_begin;
  // Tile i of K or V lives in stage (i - tile_begin) % 2; each use of a stage is one phase of its barriers.
  auto stage = [&](int tile) { return (tile - tile_begin) & 1; };
  auto parity = [&](int tile) { return ((tile - tile_begin) >> 1) & 1; };

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
    if (warp_id != Tr::kConsumerWarps || lane != 0 || tile_begin == tile_end) return;
    auto load = [&](const CUtensorMap* map, bf16* stages, uint64_t* full, uint64_t* empty, int tile) {
      if (tile - tile_begin >= 2) tma::wait(&empty[stage(tile)], parity(tile) ^ 1);  // the use two tiles back
      bf16* dst = stages + stage(tile) * kKvElems;
      tma::arrive_expect_bytes(&full[stage(tile)], kKvElems * int(sizeof(bf16)));
#pragma unroll
      for (int c = 0; c < kDh / 64; ++c)
        tma::load_4d(dst + c * Tr::KvTile::kBlockElems, map, &full[stage(tile)], 64 * c, kvh, tile * kBlockN, b);
    };
    tma::arrive_expect_bytes(q_full, Tr::QTile::kElems * int(sizeof(bf16)));
#pragma unroll
    for (int c = 0; c < kDh / 64; ++c) tma::load_4d(sQ + c * Tr::QTile::kBlockElems, &q_map, q_full, 64 * c, h, m0, b);
    load(&k_map, sK, k_full, k_empty, tile_begin);
    for (int tile = tile_begin; tile < tile_end; ++tile) {  // the consumers' order: K_{j+1} with V_j
      if (tile + 1 < tile_end) load(&k_map, sK, k_full, k_empty, tile + 1);
      load(&v_map, sV, v_full, v_empty, tile);
    }
    return;
  }

  wgmma::set_max_registers<Tr::kConsumerRegisters, true>();
  const int wg = warp_id / 4, warp = warp_id % 4, g = lane / 4, t = lane % 4;
  const int wg_m0 = m0 + 64 * wg, row0 = wg_m0 + warp * 16 + g;
  float o[kDh / 2] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};  // raw scores; rows g and g + 8 of this warp
  if (tile_begin < tile_end) {
    auto release = [&](uint64_t* empty, int tile) {
      if (lane == 0) tma::arrive(&empty[stage(tile)]);
    };
    auto scores = [&](float(&s)[kBlockN / 2], int tile) {  // S = Q K^T, issued and committed
#pragma unroll
      for (int kk = 0; kk < kDh / 16; ++kk)
        wgmma::wgmma_ss<0, 0>(s, wgmma::k_major<kBlockM, kDh>(sQ, 64 * wg, kk * 16),
                              wgmma::k_major<kBlockN, kDh>(sK + stage(tile) * kKvElems, 0, kk * 16), kk > 0);
      wgmma::commit();
    };
    auto accumulate_values = [&](const uint32_t(&p)[kBlockN / 16][4], int tile) {  // O += P V, issued, committed
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
        wgmma::wgmma_rs<1>(o, p[kk], wgmma::mn_major<kBlockN, kDh>(sV + stage(tile) * kKvElems, kk * 16, 0), 1);
      wgmma::commit();
    };

    tma::wait(q_full, 0);
    tma::wait(&k_full[stage(tile_begin)], parity(tile_begin));
    float s[kBlockN / 2], correction[2];
    uint32_t p[kBlockN / 16][4];
    wgmma::fence();
    scores(s, tile_begin);
    wgmma::wait<0>();
    wgmma::pin(s);
    release(k_empty, tile_begin);
    online_softmax<kBlockN>(s, row_max, row_sum, correction, mask, wg_m0, row0, tile_begin * kBlockN, t, a.scale_log2);
    pack_probabilities<kBlockN>(p, s);

    // Every iteration but the last overlaps the next tile's softmax with this tile's P V (no branch around the
    // wgmma issue: the compiler then keeps the products asynchronous).
    for (int tile = tile_begin; tile + 1 < tile_end; ++tile) {
      tma::wait(&k_full[stage(tile + 1)], parity(tile + 1));
      tma::wait(&v_full[stage(tile)], parity(tile));
      wgmma::fence();
      scores(s, tile + 1);
      accumulate_values(p, tile);
      wgmma::wait<1>();
      wgmma::pin(s);
      release(k_empty, tile + 1);
      online_softmax<kBlockN>(s, row_max, row_sum, correction, mask, wg_m0, row0, (tile + 1) * kBlockN, t,
                              a.scale_log2);
      wgmma::wait<0>();
      wgmma::pin(o);
      wgmma::pin(p);
      release(v_empty, tile);
#pragma unroll
      for (int d = 0; d < kDh / 8; ++d)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[4 * d + e] *= correction[e >> 1];
      pack_probabilities<kBlockN>(p, s);
    }
    tma::wait(&v_full[stage(tile_end - 1)], parity(tile_end - 1));
    wgmma::fence();
    accumulate_values(p, tile_end - 1);
    wgmma::wait<0>();
    wgmma::pin(o);
  }

  const int64_t q_stride = int64_t(a.Hq) * kDh;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = row0 + 8 * r;
    if (row >= mask.Tq) continue;
    const float inv = sum > 0 ? 1.f / sum : 0.f;
    bf16* out_row = a.out + (int64_t(b) * mask.Tq + row) * q_stride + h * kDh;
#pragma unroll
    for (int d = 0; d < kDh / 8; ++d)
      *reinterpret_cast<__nv_bfloat162*>(out_row + d * 8 + 2 * t) =
          __floats2bfloat162_rn(o[4 * d + 2 * r] * inv, o[4 * d + 2 * r + 1] * inv);
    if (t == 0)
      a.lse[(int64_t(b) * a.Hq + h) * mask.Tq + row] =
          sum > 0 ? (row_max[r] * a.scale_log2 + log2f(sum)) / kLog2e : -INFINITY;
  }
#endif  // PRIMER_WGMMA
}

template <int kDh> void launch(const ForwardArgs& a, const void* q, const void* k, const void* v, int B) {
  using Tr = Traits<kDh>;
  constexpr auto kernel = attention_forward_wgmma_kernel<kDh>;
  allow_dynamic_smem<kernel>(Tr::kSmemBytes);
  const dim3 grid((a.mask.Tq + Tr::kBlockM - 1) / Tr::kBlockM, a.Hq, B);
  const CUtensorMap q_map = token_head_tensor_map(q, B, a.mask.Tq, a.Hq, kDh, Tr::kBlockM);
  const CUtensorMap k_map = token_head_tensor_map(k, B, a.mask.Tk, a.Hkv, kDh, Tr::kBlockN);
  const CUtensorMap v_map = token_head_tensor_map(v, B, a.mask.Tk, a.Hkv, kDh, Tr::kBlockN);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, cuda::stream()>>>(a, q_map, k_map, v_map);
  PRIMER_CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_forward_wgmma(void* out, float* lse, const void* q, const void* k, const void* v,
                             const AttentionDims& d) {
  const ForwardArgs a{static_cast<bf16*>(out), lse, int(d.Hq), int(d.Hkv), int(d.Hq / d.Hkv), d.scale * kLog2e,
                      attn::Mask::of(d)};
  if (d.Dh == 64)
    launch<64>(a, q, k, v, int(d.B));
  else
    launch<128>(a, q, k, v, int(d.B));
}

}  // namespace primer::ops::cuda_ops
