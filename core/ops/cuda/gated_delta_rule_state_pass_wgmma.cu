// The gated delta rule's sequential state pass (gated_delta_rule_forward.cu's kernel 2, the same maths) on Hopper's
// warpgroup MMA (sm_90a), for key dim 128 and value blocks of 32 or 64 columns.
//
// The mma.sync pass is bound by shared-memory reads, not by its tensor work: each warp loads its own operand
// fragments, so the state tile is read by four warps for U = W S and again for Q S (Nsight Compute, H200, B 1,
// T 16384: the L1/shared pipe 65% busy on the active SMs, ~2,400 wavefronts a chunk of which ldmatrix ~1,660). Here the
// tensor cores read each operand once per warpgroup, and the two warpgroups split the work:
//   group 0: U = u − W S, then U and D_last ⊙ U as bf16 tiles;
//   group 1: scale·diag(γ) Q S, then + P U and the output rows (the storing pass leaves it idle until the update);
//   both:    their half of the state's key rows, S ← γ_last S + Kᵀ (D_last ⊙ U), Kᵀ read from K's tile (M-major).
// Every wgmma runs on both groups or behind a branch the compiler knows to be uniform in each warp: a product issued
// under a lane-dependent branch, or one whose accumulator other code reads while another is in flight, makes ptxas
// serialise all of them (its C7520 / C7514 notes). So group 0 adds P U to its spent W S as well (four small products),
// and the group index comes from lane 0 by a shuffle.
// Two barriers a chunk (the state staged, U staged) instead of three: the state update and P U run behind the
// second and are waited for before the next chunk stages its state. The next chunks' tiles arrive by cp.async one or
// two chunks ahead, issued after the first barrier (by then every product of the chunk before is complete).
// Against the mma.sync pass (H200, 2026-11-30, same call): B 1, T 16384, value block 32: the output pass 0.523 ->
// 0.438 ms, the storing pass 0.339 -> 0.314; B 4, T 4096, value block 64: 0.201 -> 0.149 and 0.129 -> 0.113.
#include <type_traits>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/gated_delta_rule_kernels.cuh"
#include "core/ops/cuda/pass_mode.h"
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

template <int BV, bool kOutput, int Stages> struct WgmmaPassLayout {
  static constexpr int kStages = Stages;
  using Rows = Sw128Tile<kChunk, kKeys>;       // W, K, Q: [chunk row][key]
  using Square = Sw128Tile<kChunk, kChunk>;    // P
  using State = Sw128Tile<kKeys, 64>;          // the bf16 state [key][value]: BV of its 64 columns used
  using Values = Sw128Tile<kChunk, 64>;        // U and D_last ⊙ U, [chunk row][value]: BV columns used
  static constexpr int kUElems = kChunk * BV;  // the u slice, in tile/mma.cuh's swizzle (read element-wise)
  static constexpr int kStageElems = 2 * Rows::kElems + kUElems + (kOutput ? Rows::kElems + Square::kElems : 0);
  static constexpr int kTileElems = kStages * kStageElems + State::kElems + 2 * Values::kElems;
  // The tiles from the first 1024-byte boundary, then each stage's G.
  static constexpr size_t kBytes = 1024 + kTileElems * sizeof(bf16) + kStages * kChunk * sizeof(float);
  static_assert(kStageElems * sizeof(bf16) % 1024 == 0, "every tile starts on a swizzle atom");
};

template <int BV, int kStages, bool kOutput, bool kStore> __global__ void __launch_bounds__(kThreads)
    state_pass_wgmma_kernel(Sizes sz, Inputs in, Scratch s, const float* state_in, bf16* o, float* state_out) {
  cuda::await_prior_grid();
#ifdef PRIMER_WGMMA
  constexpr int D = kKeys;
  using Ly = WgmmaPassLayout<BV, kOutput, kStages>;
  using Rows = typename Ly::Rows;
  using Square = typename Ly::Square;
  using State = typename Ly::State;
  using Values = typename Ly::Values;
  extern __shared__ __align__(1024) unsigned char smem[];
  bf16* tiles = wgmma::aligned_tiles<bf16>(smem);
  float* gates = reinterpret_cast<float*>(tiles + Ly::kTileElems);
  struct Stage {
    bf16 *W, *K, *u, *Q, *P;
    float* G;
  };
  auto stage = [&](int i) {  // a stage's tiles, by arithmetic (an array of them would live in local memory)
    const int j = int(unsigned(i) % kStages);
    bf16* base = tiles + j * Ly::kStageElems;
    bf16* u = base + 2 * Rows::kElems;
    bf16* q = u + Ly::kUElems;
    return Stage{base, base + Rows::kElems, u, q, q + Rows::kElems, gates + j * kChunk};
  };
  bf16* sS = tiles + kStages * Ly::kStageElems;
  bf16* sU = sS + State::kElems;
  bf16* sU2 = sU + Values::kElems;

  const int col0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // The warpgroup, as a value the compiler knows to be the same on every lane (from lane 0): the groups' different
  // products are then no divergence within a warp, which would serialise every wgmma.
  const int group = __shfl_sync(0xffffffffu, warp / 4, 0), thread_in_group = threadIdx.x % 128;
  const int ms = 16 * warp;        // the state's key rows of this warp (group g: 64g .. 64g + 63)
  const int mu = 16 * (warp % 4);  // the chunk rows of this warp in its group's products with 64 rows
  const int64_t bh = int64_t(b) * sz.H + h;
  const int64_t row_stride = int64_t(sz.H) * D;

  float S[BV / 8][4];
  for_each(S, ms, 0, lane, [&](int r, int c, float& v) { v = state_in ? state_in[(bh * D + r) * D + col0 + c] : 0.f; });

  // Chunk n's tiles into stage n % kStages: one cp.async group, empty past the last chunk, so that a wait counts
  // chunks.
  auto load = [&](int n) {
    if (n < sz.chunk_end) {
      const Stage st = stage(n);
      const int t0 = n * kChunk, valid = min(kChunk, sz.T - t0);
      const int64_t in_row = (int64_t(b) * sz.T + t0) * sz.H + h, crow = bh * int64_t(sz.chunks) * kChunk + t0;
      const int t = int(threadIdx.x);
      wgmma::load_tile_async<kChunk, D, kThreads>(st.W, s.W + crow * D, D, kChunk, t);
      wgmma::load_tile_async<kChunk, D, kThreads>(st.K, in.k + kv_offset(sz, in, b, t0, h, D), kv_stride(sz, in, D),
                                                  valid, t);
      tile::load_tile_async<kChunk, BV, kThreads>(st.u, s.u + crow * D + col0, D, kChunk);
      if constexpr (kOutput) {
        wgmma::load_tile_async<kChunk, D, kThreads>(st.Q, in.q + in_row * D, row_stride, valid, t);
        wgmma::load_tile_async<kChunk, kChunk, kThreads>(st.P, s.P + crow * kChunk, kChunk, kChunk, t);
      }
      load_row_async(st.G, s.G2 + crow);
    }
    tile::cp_async_commit();
  };

  for (int n = sz.chunk_begin; n + 1 < sz.chunk_begin + kStages; ++n) load(n);
  for (int n = sz.chunk_begin; n < sz.chunk_end; ++n) {
    const Stage st = stage(n);
    const int t0 = n * kChunk, valid = min(kChunk, sz.T - t0);
    const int64_t crow = bh * int64_t(sz.chunks) * kChunk + t0;

    for_each_pair(S, ms, 0, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<uint32_t*>(sS + State::offset(r, c)) = pack_bf16(v0, v1);
    });
    tile::cp_async_wait<kStages - 2>();
    wgmma::fence_shared_for_async();
    __syncthreads();        // chunk n's tiles and the staged state are complete; every product of chunk n − 1 is done
    load(n + kStages - 1);  // into chunk n − 1's stage

    const float* G = st.G;
    const float g_last = G[kChunk - 1];
    // Group 0: W S; group 1: Q S (the output's first term).
    float acc[BV / 8][4];
    if (kOutput || group == 0) {
      const uint64_t a = wgmma::k_major<kChunk, D>(group == 0 ? st.W : st.Q, 0, 0);
      const uint64_t state = wgmma::mn_major<D, 64>(sS, 0, 0);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        wgmma::wgmma_ss<0, 1>(flat(acc), advance(a, k_major_step<Rows>(16 * kk)),
                              advance(state, mn_major_step(16 * kk)), kk > 0);
      wgmma::commit();
    }
    // Group 1 stores the staged state while the products run (group 0's U is the chunk's critical path).
    if (kStore && group == 1)
      wgmma::store_tile_rows<D, BV, 128, 64>(s.states + ((bh * sz.chunks + n) * D) * D + col0, D, sS, thread_in_group);
    if (group == 0) {
      wgmma::wait<0>();
      wgmma::pin(flat(acc));
      const float f_lo = exp2f(g_last - G[mu + lane / 4]), f_hi = exp2f(g_last - G[mu + lane / 4 + 8]);
      for_each_pair(acc, mu, 0, lane, [&](int r, int c, float w0, float w1) {
        const float2 u = tile_pair<BV>(st.u, r, c);
        const float u0 = u.x - w0, u1 = u.y - w1;
        const float f = r == mu + lane / 4 ? f_lo : f_hi;
        *reinterpret_cast<uint32_t*>(sU + Values::offset(r, c)) = pack_bf16(u0, u1);
        *reinterpret_cast<uint32_t*>(sU2 + Values::offset(r, c)) = pack_bf16(f * u0, f * u1);
      });
    } else if constexpr (kOutput) {
      wgmma::wait<0>();
      wgmma::pin(flat(acc));
      scale_rows(acc, mu, lane, [&](int r) { return sz.scale * exp2f(G[r]); });
    }
    wgmma::fence_shared_for_async();
    __syncthreads();  // U and D_last ⊙ U complete

    // Group 1: o = (scaled Q S) + P U. Both: their key rows of S ← γ_last S + Kᵀ (D_last ⊙ U).
    const float decay = exp2f(g_last);
    scale_rows(S, ms, lane, [&](int) { return decay; });
    wgmma::fence();
    if constexpr (kOutput) {  // (group 0 adds P U to its spent W S: a branch around a wgmma would serialise them all)
      const uint64_t p = wgmma::k_major<kChunk, kChunk>(st.P, 0, 0), u = wgmma::mn_major<kChunk, 64>(sU, 0, 0);
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk)
        wgmma::wgmma_ss<0, 1>(flat(acc), advance(p, k_major_step<Square>(16 * kk)), advance(u, mn_major_step(16 * kk)),
                              1);
      wgmma::commit();
    }
    {
      const uint64_t kt = wgmma::mn_major<kChunk, D>(st.K, 0, 64 * group), u2 = wgmma::mn_major<kChunk, 64>(sU2, 0, 0);
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk)
        wgmma::wgmma_ss<1, 1>(flat(S), advance(kt, mn_major_step(16 * kk)), advance(u2, mn_major_step(16 * kk)), 1);
      wgmma::commit();
    }
    if (kStore && group == 1)
      wgmma::store_tile_rows<kChunk, BV, 128, 64>(s.U + crow * D + col0, D, sU, thread_in_group);
    if constexpr (kOutput) {
      wgmma::wait<1>();
      wgmma::pin(flat(acc));
      for_each_pair(acc, mu, 0, lane, [&](int r, int c, float v0, float v1) {
        if (group == 1 && r < valid)
          *reinterpret_cast<uint32_t*>(o + ((int64_t(b) * sz.T + t0 + r) * sz.H + h) * D + col0 + c) =
              pack_bf16(v0, v1);
      });
    }
    wgmma::wait<0>();
    wgmma::pin(flat(S));
  }
  if (state_out)
    for_each_pair(S, ms, 0, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<float2*>(state_out + (bh * D + r) * D + col0 + c) = make_float2(v0, v1);
    });
#else
  __trap();  // launched only where wgmma_available()
#endif
}

template <int BV, bool kOutput, bool kStore> void state_pass_wgmma(const GatedDeltaDims& d, const Inputs& in,
                                                                   const Scratch& s, const float* state_in, bf16* o,
                                                                   float* state_out, ChunkRange piece) {
  const dim3 grid(unsigned(kKeys / BV), unsigned(d.heads), unsigned(d.batch));
  auto launch = [&](auto stages) {
    using Ly = WgmmaPassLayout<BV, kOutput, decltype(stages)::value>;
    constexpr auto kernel = state_pass_wgmma_kernel<BV, Ly::kStages, kOutput, kStore>;
    allow_dynamic_smem<kernel>(Ly::kBytes);
    cuda::launch_dependent(kernel, grid, kThreads, Ly::kBytes, sizes_of(d, piece), in, s, state_in, o, state_out);
  };
  launch_with_stages<WgmmaPassLayout<BV, kOutput, 3>::kBytes>(grid, launch);
}

}  // namespace

bool passes_take_wgmma(const GatedDeltaDims& d, int value_block) {
  return d.key_dim == kKeys && (value_block == 32 || value_block == 64) && wgmma_available();
}

void launch_state_pass_wgmma(const GatedDeltaDims& d, const Inputs& in, const Scratch& s, const float* state_in,
                             bf16* o, float* state_out, int value_block, bool store, ChunkRange piece) {
  with_pass_mode(o != nullptr, store, [&](auto output, auto keep) {
    constexpr bool kOutput = decltype(output)::value, kStore = decltype(keep)::value;
    if (value_block == 32)
      state_pass_wgmma<32, kOutput, kStore>(d, in, s, state_in, o, state_out, piece);
    else
      state_pass_wgmma<64, kOutput, kStore>(d, in, s, state_in, o, state_out, piece);
  });
}

}  // namespace primer::ops::cuda_ops::gdr
