// The gated delta rule's backward on CUDA in four kernels: the forward's chunk prep again (now also keeping A) and
// its state pass storing the chunk-start states and U, the latter beside the reverse pass (3., which does not read
// them; two streams); then
//  3. the reverse state pass, one CTA per (64 value columns, head, batch) walking the chunks backwards with its
//     slice of dS = ∂L/∂(state at the chunk's end) in fp32 registers (the columns of dS never mix):
//       dU = diag(D_last) K dS + Pᵀ dO,   dS ← γ_last dS + Qᵀ diag(scale·γ) dO − Wᵀ dU,
//     storing dU and each chunk's dS for the last kernel, and dS after the first chunk as dstate_in (on Hopper, at
//     key dim 128 and value blocks of 32 or 64, gated_delta_rule_reverse_pass_wgmma.cu);
//  4. the per-chunk gradients, one CTA per (chunk, head, batch), everything on tensor cores from shared memory:
//       Ds = scale (dO Uᵀ ⊙ D) (lower with the diagonal);  dq = scale diag(γ) dO Sᵀ + Ds K;
//       dk = diag(D_last) U dSᵀ + Dsᵀ Q + diag(βγ) Aᵀ dW + Dl K + Dlᵀ K  with dW = −dU Sᵀ,
//       dv = diag(β) Aᵀ dU,  dL = −Aᵀ (dW X_wᵀ + dU X_uᵀ) Aᵀ,  Dl = dL ⊙ diag(β) D (strictly lower),
//     and the gate gradients as row sums (∂L/∂G_r = dq_r·q_r − dk_r·k_r on the output and state paths, plus the
//     WY and L terms), reverse-cumsummed within the chunk. Row sums are combined in a fixed order: deterministic.
//     One kernel body for both ways of running the products (tile/tile_products.cuh): on Hopper by warpgroup MMA,
//     where independent products are issued together and the warps work on the first's results while the others
//     run (H200, B 1, T 16384: 0.578 -> 0.553 ms against mma.sync's 0.573 -> 0.566 with the same body).
#include <functional>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/tile_products.cuh"
#include "core/ops/cuda/tile/warp_mma.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/gated_delta_rule.h"
#include "core/ops/cuda/gated_delta_rule_kernels.cuh"

namespace primer::ops::cuda_ops::gdr {
namespace {

using namespace tile;
using tile::pack_bf16;
using tile::swizzle;

// ---------------------------------------------------------------------------------------------------------------
// Reverse state pass.

template <int D, int BV, int Stages> struct ReverseLayout {
  static constexpr int kTile = kChunk * D, kStages = Stages;
  // One stage: Q, K, W tiles, the dO slice, P, G.
  static constexpr int kStageHalves = 3 * kTile + kChunk * BV + kChunk * kChunk;
  static constexpr size_t kStageBytes = kStageHalves * sizeof(bf16) + kChunk * sizeof(float);
  // The stages, then dS [D][BV] in bf16, −dU and scale·γ⊙dO [64][BV].
  static constexpr size_t kBytes = kStages * kStageBytes + (D * BV + 2 * kChunk * BV) * sizeof(bf16);
};

template <int D, int BV, int kStages> __global__ void __launch_bounds__(kThreads)
    reverse_pass_kernel(Sizes sz, Inputs in, const bf16* dout, Scratch s, const float* dstate_out, float* dstate_in) {
  cuda::await_prior_grid();
  using Ly = ReverseLayout<D, BV, kStages>;
  using GS = WarpGrid<D, BV, kThreads / 32>;
  using GU = WarpGrid<kChunk, BV, kThreads / 32>;
  extern __shared__ __align__(128) unsigned char smem[];
  struct Stage {
    bf16 *Q, *K, *W, *dO, *P;
    float* G;
  };
  auto stage = [&](int i) {  // a stage's tiles, by arithmetic (an array of them would live in local memory)
    bf16* base = reinterpret_cast<bf16*>(smem + unsigned(i) % kStages * Ly::kStageBytes);
    bf16* dO = base + 3 * Ly::kTile;
    return Stage{base, base + Ly::kTile, base + 2 * Ly::kTile,
                 dO,   dO + kChunk * BV, reinterpret_cast<float*>(base + Ly::kStageHalves)};
  };
  bf16* sdS = reinterpret_cast<bf16*>(smem + kStages * Ly::kStageBytes);
  bf16* sdUn = sdS + D * BV;
  bf16* sdOg = sdUn + kChunk * BV;

  const int col0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = int64_t(b) * sz.H + h;
  const int64_t row_stride = int64_t(sz.H) * D;
  const int ms = GS::m0(warp), ns = GS::n0(warp), mu = GU::m0(warp), nu = GU::n0(warp);

  float dS[GS::kTiles][4];
  for_each(dS, ms, ns, lane,
           [&](int r, int c, float& v) { v = dstate_out ? dstate_out[(bh * D + r) * D + col0 + c] : 0.f; });

  // Step i's tiles (chunk chunks − 1 − i) into stage i % kStages: one cp.async group, empty past the first chunk, so
  // that a wait counts steps.
  auto load = [&](int i) {
    const int n = sz.chunks - 1 - i;
    if (n >= 0) {
      const Stage st = stage(i);
      const int t0 = n * kChunk, valid = min(kChunk, sz.T - t0);
      const int64_t in_row = (int64_t(b) * sz.T + t0) * sz.H + h, crow = bh * int64_t(sz.chunks) * kChunk + t0;
      tile::load_tile_async<kChunk, D, kThreads>(st.Q, in.q + in_row * D, row_stride, valid);
      tile::load_tile_async<kChunk, D, kThreads>(st.K, in.k + kv_offset(sz, in, b, t0, h, D), kv_stride(sz, in, D),
                                                 valid);
      tile::load_tile_async<kChunk, D, kThreads>(st.W, s.W + crow * D, D, kChunk);
      tile::load_tile_async<kChunk, BV, kThreads>(st.dO, dout + in_row * D + col0, row_stride, valid);
      tile::load_tile_async<kChunk, kChunk, kThreads>(st.P, s.P + crow * kChunk, kChunk, kChunk);
      load_row_async(st.G, s.G2 + crow);
    }
    tile::cp_async_commit();
  };

  for (int i = 0; i + 1 < kStages; ++i) load(i);
  for (int i = 0; i < sz.chunks; ++i) {
    const int n = sz.chunks - 1 - i;
    const Stage st = stage(i);
    load(i + kStages - 1);  // that stage was released by the previous iteration's last barrier
    tile::cp_async_wait<kStages - 1>();
    const int64_t crow = bh * int64_t(sz.chunks) * kChunk + n * kChunk;

    store_tile<BV>(sdS, dS, ms, ns, lane);
    __syncthreads();

    const float* G = st.G;
    const float g_last = G[kChunk - 1];
    // dU = diag(D_last) K dS + Pᵀ dO.
    float acc[GU::kTiles][4];
    zero(acc);
    warp_mma<D, GU::kTiles>(acc, MatA<D>{st.K}, MatB<BV>{sdS}, mu, nu, lane);
    // (the stores of whole tiles from shared memory go out while the products run)
    store_tile_rows<D, BV, kThreads>(s.dstates + ((bh * sz.chunks + n) * D) * D + col0, D, sdS);
    scale_rows(acc, mu, lane, [&](int r) { return exp2f(g_last - G[r]); });
    warp_mma<kChunk, GU::kTiles>(acc, MatAT<kChunk>{st.P}, MatB<BV>{st.dO}, mu, nu, lane);
    for_each_pair(acc, mu, nu, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<uint32_t*>(sdUn + swizzle<BV>(r, c)) = pack_bf16(-v0, -v1);
    });
    // scale·γ ⊙ dO, each warp over its own block of the tile.
    const float o_lo = sz.scale * exp2f(G[mu + lane / 4]), o_hi = sz.scale * exp2f(G[mu + lane / 4 + 8]);
    for_each_pair(acc, mu, nu, lane, [&](int r, int c, float, float) {
      const float f = r == mu + lane / 4 ? o_lo : o_hi;
      const float2 x = tile_pair<BV>(st.dO, r, c);
      *reinterpret_cast<uint32_t*>(sdOg + swizzle<BV>(r, c)) = pack_bf16(f * x.x, f * x.y);
    });
    __syncthreads();

    // dS ← γ_last dS + Qᵀ (scale·γ ⊙ dO) + Wᵀ (−dU).
    const float decay = exp2f(g_last);
    scale_rows(dS, ms, lane, [&](int) { return decay; });
    warp_mma<kChunk, GS::kTiles>(dS, MatAT<D>{st.Q}, MatB<BV>{sdOg}, ms, ns, lane);
    warp_mma<kChunk, GS::kTiles>(dS, MatAT<D>{st.W}, MatB<BV>{sdUn}, ms, ns, lane);
    store_tile_rows<kChunk, BV, kThreads, true>(s.dU + crow * D + col0, D, sdUn);  // −(−dU): dU exactly
    __syncthreads();
  }
  if (dstate_in)
    for_each_pair(dS, ms, ns, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<float2*>(dstate_in + (bh * D + r) * D + col0 + c) = make_float2(v0, v1);
    });
}

// ---------------------------------------------------------------------------------------------------------------
// Per-chunk gradients.

template <int D> struct GradLayout {
  static constexpr int kTile = kChunk * D, kSquare = kChunk * kChunk;
  // R1 holds S, later X_w and X_u; R2 holds dS_end, later dW, dA and T1 = dA Aᵀ.
  static constexpr int kR1 = D * D > 2 * kTile ? D* D : 2 * kTile;
  static constexpr int kR2 = D * D > kTile + 2 * kSquare ? D* D : kTile + 2 * kSquare;
  static constexpr int kHalves = 6 * kTile + kR1 + kR2 + 2 * kSquare;  // Q K V dO U dU, R1, R2, A, Ds (then Dl)
  // G, β, γ = e^G and D_last = e^{G_last − G} per row, per-column-block row sums of dG and dβ (2 × 64 each),
  // per-row-block column sums of dG (4 × 64), the per-warp partials of the last row's dG (8), the totals (64); raw
  // keys: r per row (64) and per-column-block row sums of ⟨dk̂, k̂⟩ + ⟨dv̂, v̂⟩ (2 × 64).
  static constexpr int kFloats = 4 * kChunk + 4 * kChunk + 4 * kChunk + 8 + kChunk + 3 * kChunk;
  static constexpr size_t kBytes = kHalves * sizeof(bf16) + kFloats * sizeof(float);
};

template <int D, class Products> __global__ void __launch_bounds__(kThreads)
    chunk_grads_kernel(Sizes sz, Inputs in, const bf16* dout, Scratch s, bf16* dq, bf16* dk, bf16* dv, float* dg,
                       float* dbeta) {
  cuda::await_prior_grid();
  using Ly = GradLayout<D>;
  using G64 = WarpGrid<kChunk, kChunk, kThreads / 32>;
  using GD = WarpGrid<kChunk, D, kThreads / 32>;
  static_assert(G64::kWarpsM == 4 && GD::kWarpsM == 4 && G64::kWarpsN == 2 && GD::kWarpsN == 2,
                "the row- and column-sum arrays assume 4 × 2 warps on every 64-row product");
  using P = Products;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = P::tiles(smem);
  bf16* sK = sQ + Ly::kTile;
  bf16* sV = sK + Ly::kTile;
  bf16* sdO = sV + Ly::kTile;
  bf16* sU = sdO + Ly::kTile;
  bf16* sdU = sU + Ly::kTile;
  bf16* sR1 = sdU + Ly::kTile;
  bf16* sR2 = sR1 + Ly::kR1;
  bf16* sA = sR2 + Ly::kR2;
  bf16* sDs = sA + Ly::kSquare;
  float* sG = reinterpret_cast<float*>(sDs + Ly::kSquare);
  float* sBeta = sG + kChunk;
  float* sGamma = sBeta + kChunk;
  float* sDecayLast = sGamma + kChunk;
  float* sRowG = sDecayLast + kChunk;  // [2][64]
  float* sRowB = sRowG + 2 * kChunk;   // [2][64]
  float* sColG = sRowB + 2 * kChunk;   // [4][64]
  float* sLast = sColG + 4 * kChunk;   // [8]
  float* sTotal = sLast + 8;           // [64]
  float* sKeyScale = sTotal + kChunk;  // [64] raw keys only
  float* sRowKV = sKeyScale + kChunk;  // [2][64] raw keys only
  bf16 *sS = sR1, *sXw = sR1, *sXu = sR1 + Ly::kTile;
  bf16 *sdS = sR2, *sdW = sR2, *sdA = sR2 + Ly::kTile, *sT1 = sdA + Ly::kSquare;
  bf16* sDl = sDs;

  const int n = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int t0 = n * kChunk, valid = min(kChunk, sz.T - t0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp % G64::kWarpsM, wn = warp / G64::kWarpsM;
  const int64_t bh = int64_t(b) * sz.H + h;
  const int64_t in_row = (int64_t(b) * sz.T + t0) * sz.H + h, row_stride = int64_t(sz.H) * D;
  const int64_t crow = bh * int64_t(sz.chunks) * kChunk + t0;
  const int64_t state = (bh * sz.chunks + n) * D * D;
  const int64_t kv_at = kv_offset(sz, in, b, t0, h, D), kv_step = kv_stride(sz, in, D);

  // Four cp.async groups in the order the phases need them, so that later tiles land while earlier phases compute.
  P::template load_async<kChunk, D, kThreads>(sdO, dout + in_row * D, row_stride, valid);
  P::template load_async<kChunk, D, kThreads>(sU, s.U + crow * D, D, kChunk);
  P::template load_async<kChunk, D, kThreads>(sK, in.k + kv_at, kv_step, valid);
  load_row_async(sG, s.G2 + crow);
  tile::cp_async_commit();
  P::template load_async<D, D, kThreads>(sS, s.states + state, D, D);
  P::template load_async<kChunk, D, kThreads>(sQ, in.q + in_row * D, row_stride, valid);
  tile::cp_async_commit();
  P::template load_async<D, D, kThreads>(sdS, s.dstates + state, D, D);
  P::template load_async<kChunk, D, kThreads>(sdU, s.dU + crow * D, D, kChunk);
  tile::cp_async_commit();
  P::template load_async<kChunk, D, kThreads>(sV, in.v + kv_at, kv_step, valid);
  P::template load_async<kChunk, kChunk, kThreads>(sA, s.A + crow * kChunk, kChunk, kChunk);
  tile::cp_async_commit();
  if (threadIdx.x < kChunk)
    sBeta[threadIdx.x] = threadIdx.x < valid ? in.beta[in_row + int64_t(threadIdx.x) * sz.H] : 0.f;
  for (int i = threadIdx.x; i < 8 * kChunk + 8; i += kThreads) sRowG[i] = 0.f;  // sRowG .. sLast
  const bool raw_keys = s.key_scale != nullptr;
  if (raw_keys && threadIdx.x < kChunk) {
    sKeyScale[threadIdx.x] = threadIdx.x < valid ? s.key_scale[in_row + int64_t(threadIdx.x) * sz.H] : 0.f;
    sRowKV[threadIdx.x] = sRowKV[kChunk + threadIdx.x] = 0.f;
  }
  tile::cp_async_wait<3>();
  P::sync();

  const int m0 = G64::m0(warp), n64 = G64::n0(warp), nD = GD::n0(warp);
  const float g_last = sG[kChunk - 1];
  if (threadIdx.x < kChunk) {  // row factors, first read after the next barrier
    sGamma[threadIdx.x] = exp2f(sG[threadIdx.x]);
    sDecayLast[threadIdx.x] = exp2f(g_last - sG[threadIdx.x]);
  }
  auto decay = [&](int r, int c) { return exp2f(sG[r] - sG[c]); };  // only for c ≤ r
  auto dot_with = [&](const bf16* tile) {                           // f(row, col, v0, v1) = v · tile[row, col..col+1]
    return [tile](int r, int c, float v0, float v1) {
      const float2 x = P::template pair<kChunk, D>(tile, r, c);
      return v0 * x.x + v1 * x.y;
    };
  };
  auto one = [](int) { return 1.f; };
  // dq, dv and dk leave through dO's tile (dead once dq is formed), each staged after a barrier that follows the last
  // read of the tile before it and stored as whole rows after the next one.
  auto store_rows = [&](bf16* out) {
    P::template store_rows<kChunk, D, kThreads>(out + in_row * D, row_stride, sdO, valid);
  };
  float* row_g = sRowG + wn * kChunk;  // this warp's column block's share of ∂L/∂G_r and dβ_r
  float* row_b = sRowB + wn * kChunk;

  // Ds = scale (dO Uᵀ ⊙ D) on and below the diagonal; LL = K Kᵀ ⊙ D strictly below (kept for the L terms).
  float LL[G64::kTiles][4];
  {
    float acc[G64::kTiles][4];
    zero(acc);
    zero(LL);
    // (Products issued together run while the warps work on the first's results: on wgmma, P::*_async.)
    P::template abt_async<D, kChunk, D, kChunk, D>(acc, sdO, sU, m0, n64, lane);
    P::template abt_async<D, kChunk, D, kChunk, D>(LL, sK, sK, m0, n64, lane);
    P::template wait<1>(acc);
    for_each(acc, m0, n64, lane, [&](int r, int c, float& v) { v = c <= r ? sz.scale * decay(r, c) * v : 0.f; });
    P::template store<kChunk, kChunk>(sDs, acc, m0, n64, lane);
    P::template wait<0>(LL);
    for_each(LL, m0, n64, lane, [&](int r, int c, float& v) { v = c < r ? decay(r, c) * v : 0.f; });
  }
  tile::cp_async_wait<2>();  // S, Q
  P::sync();

  // dq = scale diag(γ) dO Sᵀ + Ds K;  ∂L/∂G_r += dq_r·q_r.
  {
    float acc[GD::kTiles][4], intra[GD::kTiles][4];
    zero(acc);
    zero(intra);
    P::template abt_async<D, kChunk, D, D, D>(acc, sdO, sS, m0, nD, lane);
    P::template ab_async<kChunk, kChunk, kChunk, kChunk, D>(intra, sDs, sK, m0, nD, lane);
    P::template wait<1>(acc);
    scale_rows(acc, m0, lane, [&](int r) { return sz.scale * sGamma[r]; });
    P::template wait<0>(intra);
#pragma unroll
    for (int j = 0; j < GD::kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] += intra[j][e];
    add_rows(row_g, row_sums(acc, m0, nD, lane, dot_with(sQ)), m0, lane, one);
    tile::cp_async_wait<1>();  // dS_end, dU
    P::sync();
    P::template store<kChunk, D>(sdO, acc, m0, nD, lane);
  }

  // The state path of dk, diag(D_last) U dS_endᵀ, and its share of the last row's ∂L/∂G together with
  // γ_last ⟨dS_end, S⟩; and dW = −dU Sᵀ, while S and dS_end are still here.
  float dK[GD::kTiles][4], dW[GD::kTiles][4];
  zero(dK);
  zero(dW);
  {
    P::template abt_async<D, kChunk, D, D, D>(dK, sU, sdS, m0, nD, lane);
    P::template abt_async<D, kChunk, D, D, D>(dW, sdU, sS, m0, nD, lane);
    P::template wait<1>(dK);
    scale_rows(dK, m0, lane, [&](int r) { return sDecayLast[r]; });
    float last = 0.f;
    for_each_pair(dK, m0, nD, lane, [&](int r, int c, float v0, float v1) { last += dot_with(sK)(r, c, v0, v1); });
    float overlap = 0.f;
    for (int i = threadIdx.x; i < D * D / 2; i += kThreads) {
      const float2 x = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(sS)[i]);
      const float2 y = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(sdS)[i]);
      overlap += x.x * y.x + x.y * y.y;
    }
    last = warp_sum(last + exp2f(g_last) * overlap);
    if (lane == 0) sLast[warp] = last;
    P::template wait<0>(dW);
  }
  tile::cp_async_wait<0>();  // V, A
  P::sync();                 // S and dS_end are dead: R1 and R2 take the WY operands
  store_rows(dq);

  // dk += Dsᵀ Q (the output path), then ∂L/∂G_r −= dk_r·k_r over both paths; dW, X_w = diag(βγ) K, X_u = diag(β) V.
  P::template atb_async<kChunk, kChunk, kChunk, kChunk, D>(dK, sDs, sQ, m0, nD, lane);
  scale_rows(dW, m0, lane, [](int) { return -1.f; });
  P::template store<kChunk, D>(sdW, dW, m0, nD, lane);
  for (int i = threadIdx.x; i < Ly::kTile / 2; i += kThreads) {
    const int r = P::template row_of_element<kChunk, D>(2 * i);
    const float bu = sBeta[r], bw = bu * sGamma[r];
    const float2 k2 = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(sK)[i]);
    const float2 v2 = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(sV)[i]);
    reinterpret_cast<__nv_bfloat162*>(sXw)[i] = __floats2bfloat162_rn(bw * k2.x, bw * k2.y);
    reinterpret_cast<__nv_bfloat162*>(sXu)[i] = __floats2bfloat162_rn(bu * v2.x, bu * v2.y);
  }
  P::template wait<0>(dK);
  add_rows(row_g, row_sums(dK, m0, nD, lane, dot_with(sK)), m0, lane, [](int) { return -1.f; });
  P::sync();

  // dA = dW X_wᵀ + dU X_uᵀ;  dX_w = Aᵀ dW feeds dk (× βγ), dβ (γ k·dX_w) and ∂L/∂G (βγ k·dX_w);
  // dX_u = Aᵀ dU gives dv (× β) and dβ (v·dX_u).
  {
    float acc[G64::kTiles][4];
    zero(acc);
    P::template abt_async<D, kChunk, D, kChunk, D>(acc, sdW, sXw, m0, n64, lane);
    P::template abt_async<D, kChunk, D, kChunk, D>(acc, sdU, sXu, m0, n64, lane);
    P::template wait<0>(acc);
    P::template store<kChunk, kChunk>(sdA, acc, m0, n64, lane);
  }
  {
    float acc[GD::kTiles][4], dXu[GD::kTiles][4];
    zero(acc);
    zero(dXu);
    P::template atb_async<kChunk, kChunk, kChunk, kChunk, D>(acc, sA, sdW, m0, nD, lane);
    P::template atb_async<kChunk, kChunk, kChunk, kChunk, D>(dXu, sA, sdU, m0, nD, lane);
    P::template wait<1>(acc);
    const float2 kw = row_sums(acc, m0, nD, lane, dot_with(sK));
    add_rows(row_b, kw, m0, lane, [&](int r) { return sGamma[r]; });
    add_rows(row_g, kw, m0, lane, [&](int r) { return sBeta[r] * sGamma[r]; });
    scale_rows(acc, m0, lane, [&](int r) { return sBeta[r] * sGamma[r]; });
#pragma unroll
    for (int j = 0; j < GD::kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dK[j][e] += acc[j][e];
    P::template wait<0>(dXu);
    add_rows(row_b, row_sums(dXu, m0, nD, lane, dot_with(sV)), m0, lane, one);
    scale_rows(dXu, m0, lane, [&](int r) { return sBeta[r]; });
    if (raw_keys) {  // dv = r·dv̂, and ⟨dv̂, v̂⟩ for dk
      add_rows(sRowKV + wn * kChunk, row_sums(dXu, m0, nD, lane, dot_with(sV)), m0, lane, one);
      scale_rows(dXu, m0, lane, [&](int r) { return sKeyScale[r]; });
    }
    P::template store<kChunk, D>(sdO, dXu, m0, nD, lane);  // dq's rows were read before the last barrier
  }
  P::sync();
  store_rows(dv);

  // T1 = dA Aᵀ.
  {
    float acc[G64::kTiles][4];
    zero(acc);
    P::template abt<kChunk, kChunk, kChunk, kChunk, kChunk>(acc, sdA, sA, m0, n64, lane);
    P::template store<kChunk, kChunk>(sT1, acc, m0, n64, lane);
  }
  P::sync();

  // dL = −Aᵀ T1 (strictly lower); with L_rj = β_r D_rj k_r·k_j: dβ_r += Σ_j dL·LL, ∂L/∂G_r += Σ_j dL β_r LL,
  // ∂L/∂G_j −= the same, and Dl = dL β_r D_rj for dk.
  {
    float acc[G64::kTiles][4], t[G64::kTiles][4];
    zero(acc);
    P::template atb<kChunk, kChunk, kChunk, kChunk, kChunk>(acc, sA, sT1, m0, n64, lane);
#pragma unroll
    for (int j = 0; j < G64::kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = m0 + lane / 4 + 8 * (e >> 1), c = n64 + 8 * j + 2 * (lane % 4) + (e & 1);
        const float dl = c < r ? -acc[j][e] : 0.f;
        t[j][e] = dl * LL[j][e];
        acc[j][e] = c < r ? dl * sBeta[r] * decay(r, c) : 0.f;
      }
    const float2 tl = row_sums(t, m0, n64, lane, [](int, int, float v0, float v1) { return v0 + v1; });
    add_rows(row_b, tl, m0, lane, one);
    add_rows(row_g, tl, m0, lane, [&](int r) { return sBeta[r]; });
    accumulate_columns(t, m0, n64, lane, sColG + wm * kChunk, [&](int r, int, float v) { return -sBeta[r] * v; });
    P::template store<kChunk, kChunk>(sDl, acc, m0, n64, lane);  // Ds was last read before two barriers ago
  }
  P::sync();

  // dk += Dl K + Dlᵀ K.
  P::template ab_async<kChunk, kChunk, kChunk, kChunk, D>(dK, sDl, sK, m0, nD, lane);
  P::template atb_async<kChunk, kChunk, kChunk, kChunk, D>(dK, sDl, sK, m0, nD, lane);
  P::template wait<0>(dK);
  if (raw_keys) {  // dk = r·(dk̂ − (⟨dk̂, k̂⟩ + ⟨dv̂, v̂⟩)·k̂): the gradient of the raw k through k̂ = r·k and v̂ = r·v
    add_rows(sRowKV + wn * kChunk, row_sums(dK, m0, nD, lane, dot_with(sK)), m0, lane, one);
    P::sync();
    for_each(dK, m0, nD, lane, [&](int r, int c, float& v) {
      const float k_hat = __bfloat162float(sK[P::template offset<kChunk, D>(r, c)]);
      v = sKeyScale[r] * (v - (sRowKV[r] + sRowKV[kChunk + r]) * k_hat);
    });
  }
  P::template store<kChunk, D>(sdO, dK, m0, nD, lane);  // dv's rows were read before the last barrier

  // ∂L/∂G_r in a fixed order, then g_t's gradient: Σ over the rows r ≥ t of its chunk (padded rows included: the
  // last row carries the state's decay, whose gradient belongs to every token of the chunk).
  if (threadIdx.x < kChunk) {
    const int r = threadIdx.x;
    float x = sRowG[r] + sRowG[kChunk + r];
    for (int i = 0; i < 4; ++i) x += sColG[i * kChunk + r];
    if (r == kChunk - 1)
      for (int i = 0; i < 8; ++i) x += sLast[i];
    sTotal[r] = x;
  }
  P::sync();
  store_rows(dk);
  if (threadIdx.x < valid) {
    const int r = threadIdx.x;
    float suffix = 0.f;
    for (int i = kChunk - 1; i >= r; --i) suffix += sTotal[i];
    dg[in_row + int64_t(r) * sz.H] = suffix;
    dbeta[in_row + int64_t(r) * sz.H] = sRowB[r] + sRowB[kChunk + r];
  }
}

template <int D, int BV> void reverse_pass(const GatedDeltaDims& d, const Inputs& in, const bf16* dout,
                                           const Scratch& s, const float* dstate_out, float* dstate_in) {
  const dim3 grid(unsigned(D / BV), unsigned(d.heads), unsigned(d.batch));
  auto launch = [&](auto stages) {
    using Ly = ReverseLayout<D, BV, decltype(stages)::value>;
    constexpr auto kernel = reverse_pass_kernel<D, BV, Ly::kStages>;
    allow_dynamic_smem<kernel>(Ly::kBytes);
    cuda::launch_dependent(kernel, grid, kThreads, Ly::kBytes, sizes_of(d), in, dout, s, dstate_out, dstate_in);
  };
  launch_with_stages<ReverseLayout<D, BV, 3>::kBytes>(grid, launch);
}

template <int D> void chunk_grads(const GatedDeltaDims& d, const Inputs& in, const bf16* dout, const Scratch& s,
                                  bf16* dq, bf16* dk, bf16* dv, float* dg, float* dbeta) {
  const dim3 grid(unsigned(chunks_of(d)), unsigned(d.heads), unsigned(d.batch));
  auto launch = [&](auto products) {
    using Products = decltype(products);
    constexpr auto kernel = chunk_grads_kernel<D, Products>;
    constexpr size_t bytes = GradLayout<D>::kBytes + Products::kAlignmentSlack;
    allow_dynamic_smem<kernel>(bytes);
    cuda::launch_dependent(kernel, grid, kThreads, bytes, sizes_of(d), in, dout, s, dq, dk, dv, dg, dbeta);
  };
  if (wgmma_available())
    launch(GroupProducts{});
  else
    launch(WarpProducts{});
}

}  // namespace
}  // namespace primer::ops::cuda_ops::gdr

namespace primer::ops::cuda_ops {

std::vector<GatedDeltaKernel> gated_delta_rule_backward_kernels(
    const GatedDeltaDims& d, const void* dout, const void* q, const void* k, const void* v, const float* g,
    const float* beta, const float* state_in, const float* dstate_out, void* dq, void* dk, void* dv, float* dg,
    float* dbeta, float* dstate_in, void* workspace, const GatedDeltaConfig& config) {
  if (d.time == 0) {  // nothing to read: the state gradient passes through
    const size_t bytes = size_t(d.batch * d.heads * d.key_dim * d.value_dim) * sizeof(float);
    return {{"state gradient copy", [=] {
               if (dstate_in && dstate_out)
                 PRIMER_CUDA_CHECK(
                     cudaMemcpyAsync(dstate_in, dstate_out, bytes, cudaMemcpyDeviceToDevice, cuda::stream()));
               else if (dstate_in)
                 PRIMER_CUDA_CHECK(cudaMemsetAsync(dstate_in, 0, bytes, cuda::stream()));
             }}};
  }
  using gdr::bf16;
  gdr::Scratch s;
  gdr::carve_scratch(d, true, config.raw_keys(), workspace, &s);
  const gdr::Inputs raw{static_cast<const bf16*>(q),
                        static_cast<const bf16*>(k),
                        static_cast<const bf16*>(v),
                        g,
                        beta,
                        int(d.kv_group())};
  const gdr::Inputs in = gdr::scaled_inputs(raw, s);  // what every kernel after the prep reads
  const bf16* dO = static_cast<const bf16*>(dout);
  auto* dq_ = static_cast<bf16*>(dq);
  auto* dk_ = static_cast<bf16*>(dk);
  auto* dv_ = static_cast<bf16*>(dv);
  const int value_block = config.value_block ? config.value_block : gated_delta_rule_default_value_block(d);
  std::function<void()> reverse_pass;
  if (gdr::passes_take_wgmma(d, value_block))
    reverse_pass = [=] { gdr::launch_reverse_pass_wgmma(d, in, dO, s, dstate_out, dstate_in, value_block); };
  else if (d.key_dim == 64)
    reverse_pass = [=] { gdr::reverse_pass<64, 64>(d, in, dO, s, dstate_out, dstate_in); };
  else if (value_block == 32)
    reverse_pass = [=] { gdr::reverse_pass<128, 32>(d, in, dO, s, dstate_out, dstate_in); };
  else if (value_block == 64)
    reverse_pass = [=] { gdr::reverse_pass<128, 64>(d, in, dO, s, dstate_out, dstate_in); };
  else
    reverse_pass = [=] { gdr::reverse_pass<128, 128>(d, in, dO, s, dstate_out, dstate_in); };
  std::vector<GatedDeltaKernel> kernels;
  if (config.scratch_from_forward) {  // a keep_scratch forward left W, U, A and the chunk states in place
    kernels.push_back({"reverse state pass", reverse_pass});
  } else {
    const float eps = config.raw_key_eps;
    kernels.push_back({"chunk prep", [=] { gdr::launch_chunk_prep(d, raw, s, eps, gdr::all_chunks(d)); }});
    // The recompute of the chunk-start states and U and the reverse pass read only the prep's and the call's inputs,
    // and each runs a CTA per (value block, head, sequence), which at long T and small B·H leaves most SMs idle: they
    // run at the same time, on two streams.
    kernels.push_back({"state pass (recompute) beside the reverse state pass", [=] {
                         cuda::run_beside(reverse_pass, [=] {
                           gdr::launch_state_pass(d, in, s, state_in, nullptr, nullptr, value_block, true,
                                                  gdr::all_chunks(d));
                         });
                       }});
  }
  if (d.key_dim == 64)
    kernels.push_back({"chunk gradients", [=] { gdr::chunk_grads<64>(d, in, dO, s, dq_, dk_, dv_, dg, dbeta); }});
  else
    kernels.push_back({"chunk gradients", [=] { gdr::chunk_grads<128>(d, in, dO, s, dq_, dk_, dv_, dg, dbeta); }});
  return kernels;
}

void gated_delta_rule_backward(const GatedDeltaDims& d, const void* dout, const void* q, const void* k, const void* v,
                               const float* g, const float* beta, const float* state_in, const float* dstate_out,
                               void* dq, void* dk, void* dv, float* dg, float* dbeta, float* dstate_in, void* workspace,
                               const GatedDeltaConfig& config) {
  for (const GatedDeltaKernel& kernel : gated_delta_rule_backward_kernels(
           d, dout, q, k, v, g, beta, state_in, dstate_out, dq, dk, dv, dg, dbeta, dstate_in, workspace, config))
    kernel.launch();
}

}  // namespace primer::ops::cuda_ops
