// The gated delta rule's reverse state pass (gated_delta_rule_backward.cu's kernel 3, the same maths) on Hopper's
// warpgroup MMA (sm_90a), for key dim 128 and value blocks of 32 or 64 columns: per chunk, walking backwards with
// this block's columns of dS = ∂L/∂(state at the chunk's end) in fp32 registers,
//   dU = diag(D_last) K dS + Pᵀ dO,   dS ← γ_last dS + Qᵀ (scale·γ ⊙ dO) − Wᵀ dU.
// As in the forward's pass (gated_delta_rule_state_pass_wgmma.cu, which says why), the tensor cores read each operand
// once per warpgroup instead of each warp loading its own fragments. The groups split the work:
//   group 0: Pᵀ dO and K dS (Pᵀ and, in the state update, Qᵀ and Wᵀ are read from the stored tiles as M-major
//            operands), then −dU as a bf16 tile;
//   group 1: scale·γ ⊙ dO as a bf16 tile and the stores of dS and dU (from their staged tiles), meanwhile;
//   both:    their half of the key rows of dS ← γ_last dS + Qᵀ (scale·γ ⊙ dO) + Wᵀ (−dU).
// The group index comes from lane 0 by a shuffle, so that group 0's products behind their branch are no divergence
// within a warp (which would make ptxas serialise every wgmma). Two barriers a chunk: dS staged, then −dU and
// scale·γ ⊙ dO staged; the next chunks' tiles arrive by cp.async one or two chunks ahead.
#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/gated_delta_rule_kernels.cuh"
#include "core/ops/cuda/tile/warp_mma.cuh"
#include "core/ops/cuda/tile/wgmma.cuh"

namespace primer::ops::cuda_ops::gdr {
namespace {

using namespace tile;
using wgmma::advance;
using wgmma::flat;
using wgmma::k_major_step;
using wgmma::mn_major_step;
using wgmma::Sw128Tile;

constexpr int kKeys = 128;

template <int BV, int Stages> struct WgmmaReverseLayout {
  static constexpr int kStages = Stages;
  using Rows = Sw128Tile<kChunk, kKeys>;     // Q, K, W: [chunk row][key]
  using Square = Sw128Tile<kChunk, kChunk>;  // P
  using State = Sw128Tile<kKeys, 64>;        // dS in bf16, [key][value]: BV of its 64 columns used
  using Values = Sw128Tile<kChunk, 64>;  // the dO slice, −dU and scale·γ ⊙ dO, [chunk row][value]: BV columns used
  static constexpr int kStageElems = 3 * Rows::kElems + Values::kElems + Square::kElems;
  static constexpr int kTileElems = kStages * kStageElems + State::kElems + 2 * Values::kElems;
  // The tiles from the first 1024-byte boundary, then each stage's G.
  static constexpr size_t kBytes = 1024 + kTileElems * sizeof(bf16) + kStages * kChunk * sizeof(float);
};

template <int BV, int kStages> __global__ void __launch_bounds__(kThreads)
    reverse_pass_wgmma_kernel(Sizes sz, Inputs in, const bf16* dout, Scratch s, const float* dstate_out,
                              float* dstate_in) {
  cuda::await_prior_grid();
#ifdef PRIMER_WGMMA
  constexpr int D = kKeys;
  using Ly = WgmmaReverseLayout<BV, kStages>;
  using Rows = typename Ly::Rows;
  using State = typename Ly::State;
  using Values = typename Ly::Values;
  extern __shared__ __align__(1024) unsigned char smem[];
  bf16* tiles = wgmma::aligned_tiles<bf16>(smem);
  float* gates = reinterpret_cast<float*>(tiles + Ly::kTileElems);
  struct Stage {
    bf16 *Q, *K, *W, *dO, *P;
    float* G;
  };
  auto stage = [&](int i) {  // a stage's tiles, by arithmetic (an array of them would live in local memory)
    const int j = int(unsigned(i) % kStages);
    bf16* base = tiles + j * Ly::kStageElems;
    bf16* dO = base + 3 * Rows::kElems;
    return Stage{base, base + Rows::kElems, base + 2 * Rows::kElems, dO, dO + Values::kElems, gates + j * kChunk};
  };
  bf16* sdS = tiles + kStages * Ly::kStageElems;
  bf16* sdUn = sdS + State::kElems;
  bf16* sdOg = sdUn + Values::kElems;

  const int col0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = __shfl_sync(0xffffffffu, warp / 4, 0);  // the same on every lane, as the compiler can see
  const int thread_in_group = threadIdx.x % 128;
  const int ms = 16 * warp;        // the key rows of dS of this warp
  const int mu = 16 * (warp % 4);  // the chunk rows of this warp in 64-row tiles
  const int64_t bh = int64_t(b) * sz.H + h;
  const int64_t row_stride = int64_t(sz.H) * D;

  float dS[BV / 8][4];
  for_each(dS, ms, 0, lane,
           [&](int r, int c, float& v) { v = dstate_out ? dstate_out[(bh * D + r) * D + col0 + c] : 0.f; });

  // Step i's tiles (chunk chunks − 1 − i) into stage i % kStages: one cp.async group, empty past the first chunk, so
  // that a wait counts steps.
  auto load = [&](int i) {
    const int n = sz.chunks - 1 - i;
    if (n >= 0) {
      const Stage st = stage(i);
      const int t0 = n * kChunk, valid = min(kChunk, sz.T - t0);
      const int64_t in_row = (int64_t(b) * sz.T + t0) * sz.H + h, crow = bh * int64_t(sz.chunks) * kChunk + t0;
      const int t = int(threadIdx.x);
      wgmma::load_tile_async<kChunk, D, kThreads>(st.Q, in.q + in_row * D, row_stride, valid, t);
      wgmma::load_tile_async<kChunk, D, kThreads>(st.K, in.k + kv_offset(sz, in, b, t0, h, D), kv_stride(sz, in, D),
                                                  valid, t);
      wgmma::load_tile_async<kChunk, D, kThreads>(st.W, s.W + crow * D, D, kChunk, t);
      wgmma::load_tile_async<kChunk, BV, kThreads, 64>(st.dO, dout + in_row * D + col0, row_stride, valid, t);
      wgmma::load_tile_async<kChunk, kChunk, kThreads>(st.P, s.P + crow * kChunk, kChunk, kChunk, t);
      load_row_async(st.G, s.G2 + crow);
    }
    tile::cp_async_commit();
  };

  for (int i = 0; i + 1 < kStages; ++i) load(i);
  for (int i = 0; i < sz.chunks; ++i) {
    const int n = sz.chunks - 1 - i;
    const Stage st = stage(i);
    const int64_t crow = bh * int64_t(sz.chunks) * kChunk + n * kChunk;

    for_each_pair(dS, ms, 0, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<uint32_t*>(sdS + State::offset(r, c)) = pack_bf16(v0, v1);
    });
    tile::cp_async_wait<kStages - 2>();
    wgmma::fence_shared_for_async();
    __syncthreads();        // step i's tiles and the staged dS are complete; every product of step i − 1 is done
    load(i + kStages - 1);  // into step i − 1's stage

    const float* G = st.G;
    const float g_last = G[kChunk - 1];
    // Group 0: Pᵀ dO and K dS.
    float du[BV / 8][4], pd[BV / 8][4];
    if (group == 0) {
      const uint64_t p = wgmma::mn_major<kChunk, kChunk>(st.P, 0, 0),
                     dout_tile = wgmma::mn_major<kChunk, 64>(st.dO, 0, 0);
      const uint64_t k = wgmma::k_major<kChunk, D>(st.K, 0, 0), ds = wgmma::mn_major<D, 64>(sdS, 0, 0);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk)
        wgmma::wgmma_ss<1, 1>(flat(pd), advance(p, mn_major_step(16 * kk)), advance(dout_tile, mn_major_step(16 * kk)),
                              kk > 0);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        wgmma::wgmma_ss<0, 1>(flat(du), advance(k, k_major_step<Rows>(16 * kk)), advance(ds, mn_major_step(16 * kk)),
                              kk > 0);
      wgmma::commit();
    }
    if (group == 0) {
      wgmma::wait<0>();
      wgmma::pin(flat(du));
      wgmma::pin(flat(pd));
      scale_rows(du, mu, lane, [&](int r) { return exp2f(g_last - G[r]); });
#pragma unroll
      for (int e = 0; e < BV / 2; ++e) flat(du)[e] += flat(pd)[e];
      for_each_pair(du, mu, 0, lane, [&](int r, int c, float v0, float v1) {
        *reinterpret_cast<uint32_t*>(sdUn + Values::offset(r, c)) = pack_bf16(-v0, -v1);
      });
    } else {
      const float o_lo = sz.scale * exp2f(G[mu + lane / 4]), o_hi = sz.scale * exp2f(G[mu + lane / 4 + 8]);
#pragma unroll
      for (int j = 0; j < BV / 8; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = mu + lane / 4 + 8 * half, c = 8 * j + 2 * (lane % 4);
          const float f = half ? o_hi : o_lo;
          const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(st.dO + Values::offset(r, c)));
          *reinterpret_cast<uint32_t*>(sdOg + Values::offset(r, c)) = pack_bf16(f * x.x, f * x.y);
        }
      // and the staged dS, while group 0's products run
      wgmma::store_tile_rows<D, BV, 128, 64>(s.dstates + ((bh * sz.chunks + n) * D) * D + col0, D, sdS,
                                             thread_in_group);
    }
    wgmma::fence_shared_for_async();
    __syncthreads();  // −dU and scale·γ ⊙ dO complete

    // Both: their key rows of dS ← γ_last dS + Qᵀ (scale·γ ⊙ dO) + Wᵀ (−dU).
    const float decay = exp2f(g_last);
    scale_rows(dS, ms, lane, [&](int) { return decay; });
    {
      const uint64_t qt = wgmma::mn_major<kChunk, D>(st.Q, 0, 64 * group), og = wgmma::mn_major<kChunk, 64>(sdOg, 0, 0);
      const uint64_t wt = wgmma::mn_major<kChunk, D>(st.W, 0, 64 * group), un = wgmma::mn_major<kChunk, 64>(sdUn, 0, 0);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk)
        wgmma::wgmma_ss<1, 1>(flat(dS), advance(qt, mn_major_step(16 * kk)), advance(og, mn_major_step(16 * kk)), 1);
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk)
        wgmma::wgmma_ss<1, 1>(flat(dS), advance(wt, mn_major_step(16 * kk)), advance(un, mn_major_step(16 * kk)), 1);
      wgmma::commit();
    }
    if (group == 1)  // −(−dU): dU exactly
      wgmma::store_tile_rows<kChunk, BV, 128, 64, true>(s.dU + crow * D + col0, D, sdUn, thread_in_group);
    wgmma::wait<0>();
    wgmma::pin(flat(dS));
  }
  if (dstate_in)
    for_each_pair(dS, ms, 0, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<float2*>(dstate_in + (bh * D + r) * D + col0 + c) = make_float2(v0, v1);
    });
#else
  __trap();  // launched only where wgmma_available()
#endif
}

template <int BV> void reverse_pass_wgmma(const GatedDeltaDims& d, const Inputs& in, const bf16* dout, const Scratch& s,
                                          const float* dstate_out, float* dstate_in) {
  const dim3 grid(unsigned(kKeys / BV), unsigned(d.heads), unsigned(d.batch));
  auto launch = [&](auto stages) {
    using Ly = WgmmaReverseLayout<BV, decltype(stages)::value>;
    constexpr auto kernel = reverse_pass_wgmma_kernel<BV, Ly::kStages>;
    allow_dynamic_smem<kernel>(Ly::kBytes);
    cuda::launch_dependent(kernel, grid, kThreads, Ly::kBytes, sizes_of(d), in, dout, s, dstate_out, dstate_in);
  };
  launch_with_stages<WgmmaReverseLayout<BV, 3>::kBytes>(grid, launch);
}

}  // namespace

void launch_reverse_pass_wgmma(const GatedDeltaDims& d, const Inputs& in, const bf16* dout, const Scratch& s,
                               const float* dstate_out, float* dstate_in, int value_block) {
  if (value_block == 32)
    reverse_pass_wgmma<32>(d, in, dout, s, dstate_out, dstate_in);
  else
    reverse_pass_wgmma<64>(d, in, dout, s, dstate_out, dstate_in);
}

}  // namespace primer::ops::cuda_ops::gdr
