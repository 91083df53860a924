// FlashAttention-2 style backward. A preprocess kernel computes delta = rowsum(dout * out) in fp32 and zeroes the
// dQ buffer. On Hopper builds and GPUs the main kernel is the wgmma one (attention_backward_wgmma.cu); otherwise,
// and with PRIMER_NO_WGMMA set, it is the mma.sync kernel here, which runs one CTA per (key tile, kv head, batch):
// each warp owns 16 keys and keeps their dK and dV accumulators in registers while the query tiles of every query
// head of the GQA group stream through shared memory (cp.async, two stages), so dK/dV are summed over the group
// without atomics and written once. dQ is accumulated into an fp32 buffer with atomics (one add per element per key
// tile): not bitwise deterministic, like FlashAttention-2.
#include <cmath>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/ops/cuda/attention.h"
#include "core/ops/cuda/attention_backward_common.cuh"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/wgmma_available.h"

namespace primer::ops::cuda_ops {
namespace {

using attn::BackwardArgs;
using tile::bf16;

template <int kDh, int kBlock> struct BackwardTraits {
  static constexpr int kWarps = kBlock / 16, kThreads = 32 * kWarps;
  // K, V; two stages of Q and dO; dS^T; two stages of the log2-domain lse and of delta.
  static constexpr int kSmemBytes =
      (6 * kBlock * kDh + kBlock * kBlock) * int(sizeof(bf16)) + 4 * kBlock * int(sizeof(float));
};

// Key and query tiles are both kBlock rows: a warp owns 16 keys for dK/dV and 16 queries for dQ.
template <int kDh, int kBlock> __global__ void __launch_bounds__(2 * kBlock) attention_backward_kernel(BackwardArgs a) {
  cuda::await_prior_grid();
  using Tr = BackwardTraits<kDh, kBlock>;
  constexpr int kThreads = Tr::kThreads, kMT = kBlock / 8, kDT = kDh / 8, kTile = kBlock * kDh;
  constexpr int kDqCols = 32;  // dQ columns per pass: bounds the registers the dQ product needs
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + kTile;
  bf16* sQ = sV + kTile;                                          // [2][kBlock][kDh]
  bf16* sdO = sQ + 2 * kTile;                                     // [2][kBlock][kDh]
  bf16* sdS = sdO + 2 * kTile;                                    // [kBlock keys][kBlock queries]
  float* sLse = reinterpret_cast<float*>(sdS + kBlock * kBlock);  // [2][kBlock]
  float* sDelta = sLse + 2 * kBlock;                              // [2][kBlock]

  const int n0 = (gridDim.x - 1 - blockIdx.x) * kBlock;  // late key tiles first (the Hopper kernel starts early ones)
  const int kvh = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const attn::Mask& mask = a.mask;
  const int64_t q_stride = int64_t(a.Hq) * kDh, kv_stride = int64_t(a.Hkv) * kDh;
  const int64_t kv_base = (int64_t(b) * mask.Tk * a.Hkv + kvh) * kDh;

  int q_lo, q_hi;
  mask.query_range(n0, min(n0 + kBlock, mask.Tk), &q_lo, &q_hi);
  const int tile_begin = q_lo / kBlock, tiles = q_hi > q_lo ? (q_hi + kBlock - 1) / kBlock - tile_begin : 0;
  const int steps = tiles * a.group;  // (query head of the group, query tile) pairs

  tile::load_tile_async<kBlock, kDh, kThreads>(sK, a.k + kv_base + n0 * kv_stride, kv_stride, mask.Tk - n0);
  tile::load_tile_async<kBlock, kDh, kThreads>(sV, a.v + kv_base + n0 * kv_stride, kv_stride, mask.Tk - n0);
  auto step_head = [&](int step) { return kvh * a.group + step / tiles; };
  auto step_m0 = [&](int step) { return (tile_begin + step % tiles) * kBlock; };
  auto load_queries = [&](int step, int stage) {
    const int h = step_head(step), m0 = step_m0(step);
    const int64_t base = (int64_t(b) * mask.Tq + m0) * q_stride + h * kDh;
    tile::load_tile_async<kBlock, kDh, kThreads>(sQ + stage * kTile, a.q + base, q_stride, mask.Tq - m0);
    tile::load_tile_async<kBlock, kDh, kThreads>(sdO + stage * kTile, a.dout + base, q_stride, mask.Tq - m0);
  };
  if (steps > 0) load_queries(0, 0);
  tile::cp_async_commit();

  float dk[kDT][4] = {}, dv[kDT][4] = {};
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1, h = step_head(step), m0 = step_m0(step);
    if (step + 1 < steps) {
      load_queries(step + 1, stage ^ 1);
      tile::cp_async_commit();
    }
    for (int i = threadIdx.x; i < kBlock; i += kThreads) {
      const int row = m0 + i;
      const int64_t at = (int64_t(b) * a.Hq + h) * mask.Tq + row;
      sLse[stage * kBlock + i] = row < mask.Tq ? a.lse[at] * attn::kLog2e : 0.f;  // rows past Tq are masked out
      sDelta[stage * kBlock + i] = row < mask.Tq ? a.delta[at] : 0.f;
    }
    if (step + 1 < steps)
      tile::cp_async_wait<1>();
    else
      tile::cp_async_wait<0>();
    __syncthreads();
    const bf16* tQ = sQ + stage * kTile;
    const bf16* tdO = sdO + stage * kTile;
    const float* lse2 = sLse + stage * kBlock;
    const float* delta = sDelta + stage * kBlock;

    // S^T (this warp's 16 keys x kBlock queries) = K Q^T, and dP^T = V dO^T.
    float st[kMT][4] = {}, dpt[kMT][4] = {};
#pragma unroll
    for (int kk = 0; kk < kDh / 16; ++kk) {
      uint32_t ka[4], va[4];
      tile::load_a<kDh>(ka, sK, warp * 16, kk * 16, lane);
      tile::load_a<kDh>(va, sV, warp * 16, kk * 16, lane);
#pragma unroll
      for (int mp = 0; mp < kMT / 2; ++mp) {
        uint32_t bq[4], bo[4];
        tile::load_b_pair_nk<kDh>(bq, tQ, mp * 16, kk * 16, lane);
        tile::load_b_pair_nk<kDh>(bo, tdO, mp * 16, kk * 16, lane);
        tile::mma_bf16(st[2 * mp], ka, bq[0], bq[1]);
        tile::mma_bf16(st[2 * mp + 1], ka, bq[2], bq[3]);
        tile::mma_bf16(dpt[2 * mp], va, bo[0], bo[1]);
        tile::mma_bf16(dpt[2 * mp + 1], va, bo[2], bo[3]);
      }
    }

    // P^T = exp(S^T * scale - lse) and dS^T = P^T * (dP^T - delta) * scale, in place.
    const int key0 = n0 + warp * 16 + g;
    const bool masked = !mask.tile_fully_visible(m0, kBlock, n0, kBlock);
#pragma unroll
    for (int j = 0; j < kMT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = j * 8 + 2 * t + (e & 1);
        const bool vis = !masked || mask.visible(m0 + col, key0 + (e >> 1) * 8);
        const float p = vis ? exp2f(st[j][e] * a.scale_log2 - lse2[col]) : 0.f;
        st[j][e] = p;
        dpt[j][e] = p * (dpt[j][e] - delta[col]) * a.scale;
      }

      // dV += P^T dO and dK += dS^T Q (k = queries).
#pragma unroll
    for (int kk = 0; kk < kBlock / 16; ++kk) {
      uint32_t pa[4], dsa[4];
      tile::accumulators_to_a<kMT>(pa, st, kk);
      tile::accumulators_to_a<kMT>(dsa, dpt, kk);
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        uint32_t bo[4], bq[4];
        tile::load_b_pair_kn<kDh>(bo, tdO, dp * 16, kk * 16, lane);
        tile::load_b_pair_kn<kDh>(bq, tQ, dp * 16, kk * 16, lane);
        tile::mma_bf16(dv[2 * dp], pa, bo[0], bo[1]);
        tile::mma_bf16(dv[2 * dp + 1], pa, bo[2], bo[3]);
        tile::mma_bf16(dk[2 * dp], dsa, bq[0], bq[1]);
        tile::mma_bf16(dk[2 * dp + 1], dsa, bq[2], bq[3]);
      }
    }

    // dS^T to shared memory, then dQ (this warp's 16 queries x kDh) = dS K, added to the fp32 buffer.
#pragma unroll
    for (int j = 0; j < kMT; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<__nv_bfloat162*>(sdS + tile::swizzle<kBlock>(warp * 16 + g + 8 * r, j * 8 + 2 * t)) =
            __floats2bfloat162_rn(dpt[j][2 * r], dpt[j][2 * r + 1]);
    __syncthreads();
    uint32_t dsq[kBlock / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBlock / 16; ++kk) tile::load_a_transposed<kBlock>(dsq[kk], sdS, warp * 16, kk * 16, lane);
    const int qrow = m0 + warp * 16 + g;
    float* dq_row = a.dq_accum + (int64_t(b) * mask.Tq + qrow) * q_stride + h * kDh;
#pragma unroll
    for (int c0 = 0; c0 < kDh; c0 += kDqCols) {
      float acc[kDqCols / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < kBlock / 16; ++kk)
#pragma unroll
        for (int dp = 0; dp < kDqCols / 16; ++dp) {
          uint32_t bk[4];
          tile::load_b_pair_kn<kDh>(bk, sK, c0 + dp * 16, kk * 16, lane);
          tile::mma_bf16(acc[2 * dp], dsq[kk], bk[0], bk[1]);
          tile::mma_bf16(acc[2 * dp + 1], dsq[kk], bk[2], bk[3]);
        }
#pragma unroll
      for (int d = 0; d < kDqCols / 8; ++d)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (qrow + 8 * r >= mask.Tq) continue;
          float* dst = dq_row + 8 * r * q_stride + c0 + d * 8 + 2 * t;
#if __CUDA_ARCH__ >= 900  // one vector atomic for the pair (8-byte aligned: even column of an even row length)
          atomicAdd(reinterpret_cast<float2*>(dst), make_float2(acc[d][2 * r], acc[d][2 * r + 1]));
#else
          atomicAdd(dst, acc[d][2 * r]);
          atomicAdd(dst + 1, acc[d][2 * r + 1]);
#endif
        }
    }
    __syncthreads();  // sdS, this stage and the statistics are reused two steps on
  }
  tile::cp_async_wait<0>();  // no query tile at all: K/V loads still land before the CTA exits

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = n0 + warp * 16 + g + 8 * r;
    if (key >= mask.Tk) continue;
    bf16* dk_row = a.dk + kv_base + key * kv_stride;
    bf16* dv_row = a.dv + kv_base + key * kv_stride;
#pragma unroll
    for (int d = 0; d < kDT; ++d) {
      *reinterpret_cast<__nv_bfloat162*>(dk_row + d * 8 + 2 * t) =
          __floats2bfloat162_rn(dk[d][2 * r], dk[d][2 * r + 1]);
      *reinterpret_cast<__nv_bfloat162*>(dv_row + d * 8 + 2 * t) =
          __floats2bfloat162_rn(dv[d][2 * r], dv[d][2 * r + 1]);
    }
  }
}

// delta = rowsum(dout * out), and the dQ buffers zeroed (dq_accum2: a second source's own, or null).
void launch_delta(float* delta, float* dq_accum, float* dq_accum2, const bf16* dout, const bf16* out, int B, int Tq,
                  int Hq, int Dh) {
  const int64_t rows = int64_t(B) * Tq * Hq;
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned((rows + kThreads / 32 - 1) / (kThreads / 32));
  cuda::launch_dependent(Dh == 64 ? attn::attention_delta_kernel<64> : attn::attention_delta_kernel<128>, blocks,
                         kThreads, 0, delta, dq_accum, dq_accum2, dout, out, rows, Tq, Hq);
}

template <int kDh, int kBlock> void launch_backward(const BackwardArgs& a, int B) {
  using Tr = BackwardTraits<kDh, kBlock>;
  constexpr auto kernel = attention_backward_kernel<kDh, kBlock>;
  allow_dynamic_smem<kernel>(Tr::kSmemBytes);
  const dim3 grid((a.mask.Tk + kBlock - 1) / kBlock, a.Hkv, B);
  cuda::launch_dependent(kernel, grid, Tr::kThreads, Tr::kSmemBytes, a);
}

// One source's kernel arguments.
BackwardArgs backward_args(float* dq_accum, void* dk, void* dv, float* delta, const void* dout, const void* q,
                           const void* k, const void* v, const float* lse, const AttentionDims& d) {
  return {static_cast<const bf16*>(q),
          static_cast<const bf16*>(k),
          static_cast<const bf16*>(v),
          static_cast<const bf16*>(dout),
          lse,
          delta,
          dq_accum,
          static_cast<bf16*>(dk),
          static_cast<bf16*>(dv),
          int(d.Hq),
          int(d.Hkv),
          int(d.Hq / d.Hkv),
          d.scale,
          d.scale * attn::kLog2e,
          attn::Mask::of(d)};
}

}  // namespace

void attention_backward(float* dq_accum, void* dk, void* dv, float* delta, const void* dout, const void* q,
                        const void* k, const void* v, const void* out, const float* lse, const AttentionDims& d) {
  const BackwardArgs a = backward_args(dq_accum, dk, dv, delta, dout, q, k, v, lse, d);
  launch_delta(delta, dq_accum, nullptr, a.dout, static_cast<const bf16*>(out), int(d.B), int(d.Tq), int(d.Hq),
               int(d.Dh));
  if (wgmma_available())
    attn::launch_backward_wgmma(a, int(d.B), int(d.Dh));
  else if (d.Dh == 64)
    launch_backward<64, 64>(a, int(d.B));
  else
    launch_backward<128, 64>(a, int(d.B));
}

void attention_backward_two_sources(const AttentionSourceGrads (&grads)[2], float* delta, const void* dout,
                                    const void* out, const float* lse, const AttentionSource (&sources)[2]) {
  PRIMER_CHECK(wgmma_available(), "attention_backward_two_sources: needs the Hopper (wgmma) kernels");
  BackwardArgs a[2];
  for (int s = 0; s < 2; ++s)
    a[s] = backward_args(grads[s].dq_accum, grads[s].dk, grads[s].dv, delta, dout, sources[s].q, sources[s].k,
                         sources[s].v, lse, sources[s].dims);
  const AttentionDims& d = sources[0].dims;
  float* own_dq1 = grads[1].dq_accum != grads[0].dq_accum ? grads[1].dq_accum : nullptr;
  launch_delta(delta, grads[0].dq_accum, own_dq1, a[0].dout, static_cast<const bf16*>(out), int(d.B), int(d.Tq),
               int(d.Hq), int(d.Dh));
  attn::launch_backward_two_sources_wgmma(a[0], a[1], int(d.B), int(d.Dh));
}

}  // namespace primer::ops::cuda_ops
