// The gated delta rule's forward on CUDA in two kernels (gated_delta_rule_kernels.cuh has the maths):
//  1. chunk prep, one CTA per (chunk, head, batch): cp.async loads of Q, K, V; the in-chunk gate cumsum; K Kᵀ and
//     Q Kᵀ on tensor cores; the triangular inverse A = (I + L)⁻¹ in fp32 by the whole CTA in 16 × 16 blocks
//     (tile/unit_lower_inverse.cuh); W = A·diag(βγ)K and u = A·diag(β)V on tensor cores. Writes G2, P, W, u (and A
//     for the backward), each staged in a free shared tile and stored as whole rows.
//     With raw keys (KZLA) it first scales each token's k and v by 1/sqrt(‖k‖² + ε) and writes them for the others.
//  2. the state pass, one CTA per (64 value columns, head, batch) walking the chunks in order with its slice of
//     the fp32 state in registers, the next chunks' tiles arriving by cp.async one or two chunks ahead (two or three
//     stages, takes_three_stages in gated_delta_rule_kernels.cuh) while this one computes: U = u − W S,
//     o = scale·diag(γ) Q S + P U, S ← γ_last S + Kᵀ diag(D_last) U, U never leaving the chip. The backward's
//     recompute runs the same kernel storing the chunk-start states and U instead of o. On Hopper, at key dim 128
//     and value blocks of 32 or 64, gated_delta_rule_state_pass_wgmma.cu runs it instead.
// Where the pass leaves half the SMs idle, the forward runs both kernels on pieces of the sequence: each piece's pass
// beside the next piece's prep on a second stream (forward_pieces, cuda::run_beside), the state between pieces in
// fp32 in the scratch.
#include <algorithm>
#include <type_traits>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/unit_lower_inverse.cuh"
#include "core/ops/cuda/tile/warp_mma.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/gated_delta_rule.h"
#include "core/ops/cuda/gated_delta_rule_kernels.cuh"
#include "core/ops/cuda/pass_mode.h"
#include "core/ops/cuda/sm_count.h"

namespace primer::ops::cuda_ops::gdr {
namespace {

using namespace tile;
using tile::pack_bf16;
using tile::swizzle;

// ---------------------------------------------------------------------------------------------------------------
// Chunk prep.

template <int D> struct PrepLayout {
  static constexpr int kTile = kChunk * D;  // bf16 elements of a 64 × D tile
  static constexpr int kLStride = 68;       // fp32 row stride of L: 16-byte aligned rows for float4 reads
  static constexpr size_t kBytes =
      (3 * kTile + kChunk * kChunk) * sizeof(bf16) + (kChunk * kLStride + 2 * kChunk) * sizeof(float);
};

template <int D> __global__ void __launch_bounds__(kThreads)
    chunk_prep_kernel(Sizes sz, Inputs in, Scratch s, float raw_key_eps) {
  cuda::await_prior_grid();
  using Ly = PrepLayout<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + Ly::kTile;
  bf16* sV = sK + Ly::kTile;
  bf16* sA = sV + Ly::kTile;  // [64][64]
  float* sL = reinterpret_cast<float*>(sA + kChunk * kChunk);
  float* sG = sL + kChunk * Ly::kLStride;
  float* sBeta = sG + kChunk;

  const int n = sz.chunk_begin + int(blockIdx.x), h = blockIdx.y, b = blockIdx.z;
  const int t0 = n * kChunk, valid = min(kChunk, sz.T - t0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t in_row = (int64_t(b) * sz.T + t0) * sz.H + h;  // (b, t0, h) in [B, T, H]
  const int64_t row_stride = int64_t(sz.H) * D;
  const int64_t crow = (int64_t(b) * sz.H + h) * int64_t(sz.chunks) * kChunk + t0;  // scratch row of token t0
  const int64_t kv_at = kv_offset(sz, in, b, t0, h, D), kv_step = kv_stride(sz, in, D);

  tile::load_tile_async<kChunk, D, kThreads>(sQ, in.q + in_row * D, row_stride, valid);
  tile::load_tile_async<kChunk, D, kThreads>(sK, in.k + kv_at, kv_step, valid);
  tile::load_tile_async<kChunk, D, kThreads>(sV, in.v + kv_at, kv_step, valid);
  tile::cp_async_commit();

  // In-chunk inclusive cumsum of g (log2 units) by two warp scans; padded rows have g = β = 0.
  if (threadIdx.x < kChunk) {
    const int r = threadIdx.x;
    float x = r < valid ? in.g[in_row + int64_t(r) * sz.H] * kLog2e : 0.f;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, x, off);
      if (lane >= off) x += y;
    }
    sG[r] = x;
    sBeta[r] = r < valid ? in.beta[in_row + int64_t(r) * sz.H] : 0.f;
  }
  __syncthreads();
  if (threadIdx.x >= 32 && threadIdx.x < kChunk) sG[threadIdx.x] += sG[31];
  __syncthreads();
  if (threadIdx.x < kChunk) s.G2[crow + threadIdx.x] = sG[threadIdx.x];
  tile::cp_async_wait<0>();
  __syncthreads();

  // Raw keys: k̂ = r·k and v̂ = r·v, r = 1/sqrt(‖k‖² + ε) in f32, rounded once; a warp per token. Every later kernel
  // reads the k̂, v̂ written here, and the gradient kernel turns its gradients into those of k and v through r.
  if (s.k_hat) {
    for (int r = warp; r < valid; r += kThreads / 32) {
      float sum = 0.f;
      for (int c = 2 * lane; c < D; c += 64) {
        const float2 x = tile_pair<D>(sK, r, c);
        sum += x.x * x.x + x.y * x.y;
      }
      const float scale_r = rsqrtf(warp_sum(sum) + raw_key_eps);
      const int64_t at = (in_row + int64_t(r) * sz.H) * D;
      for (int c = 2 * lane; c < D; c += 64) {
        const float2 x = tile_pair<D>(sK, r, c), y = tile_pair<D>(sV, r, c);
        const __nv_bfloat162 kh = __floats2bfloat162_rn(scale_r * x.x, scale_r * x.y);
        const __nv_bfloat162 vh = __floats2bfloat162_rn(scale_r * y.x, scale_r * y.y);
        *reinterpret_cast<__nv_bfloat162*>(sK + swizzle<D>(r, c)) = kh;
        *reinterpret_cast<__nv_bfloat162*>(sV + swizzle<D>(r, c)) = vh;
        *reinterpret_cast<__nv_bfloat162*>(s.k_hat + at + c) = kh;
        *reinterpret_cast<__nv_bfloat162*>(s.v_hat + at + c) = vh;
      }
      if (lane == 0) s.key_scale[in_row + int64_t(r) * sz.H] = scale_r;
    }
    __syncthreads();
  }

  // L (fp32, shared) and P (bf16, global) from K Kᵀ and Q Kᵀ.
  {
    using Grid = WarpGrid<kChunk, kChunk, kThreads / 32>;
    const int m0 = Grid::m0(warp), n0 = Grid::n0(warp);
    float kk[Grid::kTiles][4], qk[Grid::kTiles][4];
    zero(kk);
    zero(qk);
    warp_mma<D, Grid::kTiles>(kk, MatA<D>{sK}, MatBT<D>{sK}, m0, n0, lane);
    warp_mma<D, Grid::kTiles>(qk, MatA<D>{sQ}, MatBT<D>{sK}, m0, n0, lane);
    for_each(kk, m0, n0, lane, [&](int r, int c, float& v) {
      sL[r * Ly::kLStride + c] = c < r ? sBeta[r] * exp2f(sG[r] - sG[c]) * v : 0.f;
    });
    // P is staged in A's tile (free until the inverse's end) and leaves as whole rows.
    for_each(qk, m0, n0, lane, [&](int r, int c, float& v) { v = c <= r ? sz.scale * exp2f(sG[r] - sG[c]) * v : 0.f; });
    store_tile<kChunk>(sA, qk, m0, n0, lane);
  }
  __syncthreads();
  store_tile_rows<kChunk, kChunk, kThreads>(s.P + crow * kChunk, kChunk, sA);

  // A = (I + L)⁻¹ (in fp32, as Aᵀ over L's upper triangle; Q's tile, read for the last time above, is the scratch),
  // then to bf16 in sA: each thread 8 columns of a row (consecutive threads, consecutive rows: Aᵀ's columns).
  static_assert(Ly::kTile * sizeof(bf16) >= 3 * 256 * sizeof(float), "the inverse's scratch");
  unit_lower_inverse_transposed_in_place<kThreads, Ly::kLStride>(sL, reinterpret_cast<float*>(sQ), threadIdx.x);
  for (int i = threadIdx.x; i < kChunk * kChunk / 8; i += kThreads) {
    const int r = i % kChunk, c0 = 8 * (i / kChunk);
    uint32_t packed[4];
#pragma unroll
    for (int c = 0; c < 8; c += 2) {
      const float a0 = c0 + c <= r ? sL[(c0 + c) * Ly::kLStride + r] : 0.f;
      const float a1 = c0 + c + 1 <= r ? sL[(c0 + c + 1) * Ly::kLStride + r] : 0.f;
      packed[c / 2] = pack_bf16(a0, a1);
    }
    *reinterpret_cast<uint4*>(sA + swizzle<kChunk>(r, c0)) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
  // X_w = diag(βγ) K and X_u = diag(β) V in place (K and V are not needed raw any more).
  for (int i = threadIdx.x; i < Ly::kTile / 2; i += kThreads) {
    const int r = 2 * i / D;  // swizzling permutes within a row
    const float bu = sBeta[r], bw = bu * exp2f(sG[r]);
    __nv_bfloat162* pk = reinterpret_cast<__nv_bfloat162*>(sK) + i;
    __nv_bfloat162* pv = reinterpret_cast<__nv_bfloat162*>(sV) + i;
    const float2 fk = __bfloat1622float2(*pk), fv = __bfloat1622float2(*pv);
    *pk = __floats2bfloat162_rn(fk.x * bw, fk.y * bw);
    *pv = __floats2bfloat162_rn(fv.x * bu, fv.y * bu);
  }
  __syncthreads();
  if (s.A) store_tile_rows<kChunk, kChunk, kThreads>(s.A + crow * kChunk, kChunk, sA);

  // W = A X_w, u = A X_u, staged in Q's tile and L's space (both free now) and stored as whole rows.
  using Grid = WarpGrid<kChunk, D, kThreads / 32>;
  const int m0 = Grid::m0(warp), n0 = Grid::n0(warp);
  static_assert(kChunk * Ly::kLStride * sizeof(float) >= Ly::kTile * sizeof(bf16), "u's staging");
  bf16* staged[2] = {sQ, reinterpret_cast<bf16*>(sL)};
  const bf16* xs[2] = {sK, sV};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float acc[Grid::kTiles][4];
    zero(acc);
    warp_mma<kChunk, Grid::kTiles>(acc, MatA<kChunk>{sA}, MatB<D>{xs[i]}, m0, n0, lane);
    store_tile<D>(staged[i], acc, m0, n0, lane);
  }
  __syncthreads();
  store_tile_rows<kChunk, D, kThreads>(s.W + crow * D, D, staged[0]);
  store_tile_rows<kChunk, D, kThreads>(s.u + crow * D, D, staged[1]);
}

// ---------------------------------------------------------------------------------------------------------------
// State pass.

template <int D, int BV, bool kOutput, int Stages> struct PassLayout {
  static constexpr int kTile = kChunk * D, kStages = Stages;
  // One stage: W, K (and Q) tiles, the u slice (and P), G.
  static constexpr int kStageHalves = 2 * kTile + kChunk * BV + (kOutput ? kTile + kChunk * kChunk : 0);
  static constexpr size_t kStageBytes = kStageHalves * sizeof(bf16) + kChunk * sizeof(float);
  // The stages, then the bf16 state [D][BV] and U, D_last·U [64][BV].
  static constexpr size_t kBytes = kStages * kStageBytes + (D * BV + 2 * kChunk * BV) * sizeof(bf16);
};

// kOutput: write o (and S_T); kStore: write each chunk's starting state and its corrected values U for the backward
// (the backward's recompute pass stores only; a forward whose scratch the backward keeps does both).
template <int D, int BV, int kStages, bool kOutput, bool kStore> __global__ void __launch_bounds__(kThreads)
    state_pass_kernel(Sizes sz, Inputs in, Scratch s, const float* state_in, bf16* o, float* state_out) {
  cuda::await_prior_grid();
  using Ly = PassLayout<D, BV, kOutput, kStages>;
  using GS = WarpGrid<D, BV, kThreads / 32>;       // the state slice [D][BV]
  using GU = WarpGrid<kChunk, BV, kThreads / 32>;  // U and o [64][BV]
  extern __shared__ __align__(128) unsigned char smem[];
  struct Stage {
    bf16 *W, *K, *u, *Q, *P;
    float* G;
  };
  auto stage = [&](int i) {  // a stage's tiles, by arithmetic (an array of them would live in local memory)
    bf16* base = reinterpret_cast<bf16*>(smem + unsigned(i) % kStages * Ly::kStageBytes);
    bf16* u = base + 2 * Ly::kTile;
    return Stage{base,
                 base + Ly::kTile,
                 u,
                 u + kChunk * BV,
                 u + kChunk * BV + Ly::kTile,
                 reinterpret_cast<float*>(base + Ly::kStageHalves)};
  };
  bf16* sS = reinterpret_cast<bf16*>(smem + kStages * Ly::kStageBytes);
  bf16* sU = sS + D * BV;
  bf16* sU2 = sU + kChunk * BV;

  const int col0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = int64_t(b) * sz.H + h;
  const int64_t row_stride = int64_t(sz.H) * D;
  const int ms = GS::m0(warp), ns = GS::n0(warp), mu = GU::m0(warp), nu = GU::n0(warp);

  float S[GS::kTiles][4];
  for_each(S, ms, ns, lane,
           [&](int r, int c, float& v) { v = state_in ? state_in[(bh * D + r) * D + col0 + c] : 0.f; });

  // Chunk n's tiles into stage n % kStages: one cp.async group, empty past the last chunk, so that a wait counts
  // chunks.
  auto load = [&](int n) {
    if (n < sz.chunk_end) {
      const Stage st = stage(n);
      const int t0 = n * kChunk, valid = min(kChunk, sz.T - t0);
      const int64_t in_row = (int64_t(b) * sz.T + t0) * sz.H + h, crow = bh * int64_t(sz.chunks) * kChunk + t0;
      tile::load_tile_async<kChunk, D, kThreads>(st.W, s.W + crow * D, D, kChunk);
      tile::load_tile_async<kChunk, D, kThreads>(st.K, in.k + kv_offset(sz, in, b, t0, h, D), kv_stride(sz, in, D),
                                                 valid);
      tile::load_tile_async<kChunk, BV, kThreads>(st.u, s.u + crow * D + col0, D, kChunk);
      if constexpr (kOutput) {
        tile::load_tile_async<kChunk, D, kThreads>(st.Q, in.q + in_row * D, row_stride, valid);
        tile::load_tile_async<kChunk, kChunk, kThreads>(st.P, s.P + crow * kChunk, kChunk, kChunk);
      }
      load_row_async(st.G, s.G2 + crow);
    }
    tile::cp_async_commit();
  };

  for (int n = sz.chunk_begin; n + 1 < sz.chunk_begin + kStages; ++n) load(n);
  for (int n = sz.chunk_begin; n < sz.chunk_end; ++n) {
    const Stage st = stage(n);
    load(n + kStages - 1);  // that stage was released by the previous iteration's last barrier
    tile::cp_async_wait<kStages - 1>();
    const int t0 = n * kChunk, valid = min(kChunk, sz.T - t0);
    const int64_t crow = bh * int64_t(sz.chunks) * kChunk + t0;
    const float* G = st.G;

    store_tile<BV>(sS, S, ms, ns, lane);
    __syncthreads();  // the stage has landed for everyone, and sS is complete

    const float g_last = G[kChunk - 1];
    float acc[GU::kTiles][4];
    zero(acc);
    warp_mma<D, GU::kTiles>(acc, MatA<D>{st.W}, MatB<BV>{sS}, mu, nu, lane);
    // (the stores of whole tiles from shared memory go out while the products run)
    if constexpr (kStore) store_tile_rows<D, BV, kThreads>(s.states + ((bh * sz.chunks + n) * D) * D + col0, D, sS);
    const float f_lo = exp2f(g_last - G[mu + lane / 4]), f_hi = exp2f(g_last - G[mu + lane / 4 + 8]);
    for_each_pair(acc, mu, nu, lane, [&](int r, int c, float w0, float w1) {
      const float2 u = tile_pair<BV>(st.u, r, c);
      const float u0 = u.x - w0, u1 = u.y - w1;
      const float f = r == mu + lane / 4 ? f_lo : f_hi;
      *reinterpret_cast<uint32_t*>(sU + swizzle<BV>(r, c)) = pack_bf16(u0, u1);
      *reinterpret_cast<uint32_t*>(sU2 + swizzle<BV>(r, c)) = pack_bf16(f * u0, f * u1);
    });
    if constexpr (kOutput) {
      zero(acc);
      warp_mma<D, GU::kTiles>(acc, MatA<D>{st.Q}, MatB<BV>{sS}, mu, nu, lane);
      scale_rows(acc, mu, lane, [&](int r) { return sz.scale * exp2f(G[r]); });
    }
    __syncthreads();  // U complete

    if constexpr (kOutput) {
      warp_mma<kChunk, GU::kTiles>(acc, MatA<kChunk>{st.P}, MatB<BV>{sU}, mu, nu, lane);
      if constexpr (kStore) store_tile_rows<kChunk, BV, kThreads>(s.U + crow * D + col0, D, sU);
      for_each_pair(acc, mu, nu, lane, [&](int r, int c, float v0, float v1) {
        if (r < valid)
          *reinterpret_cast<uint32_t*>(o + ((int64_t(b) * sz.T + t0 + r) * sz.H + h) * D + col0 + c) =
              pack_bf16(v0, v1);
      });
    }
    const float decay = exp2f(g_last);
    scale_rows(S, ms, lane, [&](int) { return decay; });
    warp_mma<kChunk, GS::kTiles>(S, MatAT<D>{st.K}, MatB<BV>{sU2}, ms, ns, lane);
    if constexpr (kStore && !kOutput) store_tile_rows<kChunk, BV, kThreads>(s.U + crow * D + col0, D, sU);
    __syncthreads();  // everyone is done with this stage and with sS, sU, sU2
  }
  if (state_out)
    for_each_pair(S, ms, ns, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<float2*>(state_out + (bh * D + r) * D + col0 + c) = make_float2(v0, v1);
    });
}

template <int D>
void chunk_prep(const GatedDeltaDims& d, const Inputs& in, const Scratch& s, float raw_key_eps, ChunkRange piece) {
  allow_dynamic_smem<chunk_prep_kernel<D>>(PrepLayout<D>::kBytes);
  const dim3 grid(unsigned(piece.end - piece.begin), unsigned(d.heads), unsigned(d.batch));
  cuda::launch_dependent(chunk_prep_kernel<D>, grid, kThreads, PrepLayout<D>::kBytes, sizes_of(d, piece), in, s,
                         raw_key_eps);
}

template <int D, int BV, bool kOutput, bool kStore> void state_pass(const GatedDeltaDims& d, const Inputs& in,
                                                                    const Scratch& s, const float* state_in, bf16* o,
                                                                    float* state_out, ChunkRange piece) {
  const dim3 grid(unsigned(D / BV), unsigned(d.heads), unsigned(d.batch));
  auto launch = [&](auto stages) {
    using Ly = PassLayout<D, BV, kOutput, decltype(stages)::value>;
    constexpr auto kernel = state_pass_kernel<D, BV, Ly::kStages, kOutput, kStore>;
    allow_dynamic_smem<kernel>(Ly::kBytes);
    cuda::launch_dependent(kernel, grid, kThreads, Ly::kBytes, sizes_of(d, piece), in, s, state_in, o, state_out);
  };
  launch_with_stages<PassLayout<D, BV, kOutput, 3>::kBytes>(grid, launch);
}

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

size_t carve_scratch(const GatedDeltaDims& d, bool backward, bool raw_keys, void* base, Scratch* s) {
  const size_t rows = size_t(d.batch * d.heads * chunks_of(d) * kChunk);
  const size_t states = size_t(d.batch * d.heads * chunks_of(d) * d.key_dim * d.value_dim);
  size_t offset = 0;
  auto take = [&](auto*& ptr, size_t elements, bool wanted) {
    using T = std::remove_reference_t<decltype(*ptr)>;
    ptr = nullptr;
    if (!wanted) return;
    if (base) ptr = reinterpret_cast<T*>(static_cast<unsigned char*>(base) + offset);
    offset += align_up(elements * sizeof(T));
  };
  take(s->G2, rows, true);
  take(s->P, rows * kChunk, true);
  take(s->A, rows * kChunk, backward);
  take(s->W, rows * size_t(d.key_dim), true);
  take(s->u, rows * size_t(d.value_dim), true);
  take(s->U, rows * size_t(d.value_dim), backward);
  take(s->dU, rows * size_t(d.value_dim), backward);
  take(s->states, states, backward);
  take(s->dstates, states, backward);
  const size_t tokens = size_t(d.batch * d.time * d.heads);
  take(s->k_hat, tokens * size_t(d.key_dim), raw_keys);
  take(s->v_hat, tokens * size_t(d.value_dim), raw_keys);
  take(s->key_scale, tokens, raw_keys);
  take(s->piece_state, size_t(d.batch * d.heads * d.key_dim * d.value_dim), true);
  return offset;
}

void launch_chunk_prep(const GatedDeltaDims& d, const Inputs& in, const Scratch& s, float raw_key_eps,
                       ChunkRange piece) {
  if (d.key_dim == 64)
    chunk_prep<64>(d, in, s, raw_key_eps, piece);
  else
    chunk_prep<128>(d, in, s, raw_key_eps, piece);
}

void launch_state_pass(const GatedDeltaDims& d, const Inputs& in, const Scratch& s, const float* state_in, bf16* o,
                       float* state_out, int value_block, bool store, ChunkRange piece) {
  if (passes_take_wgmma(d, value_block))
    return launch_state_pass_wgmma(d, in, s, state_in, o, state_out, value_block, store, piece);
  with_pass_mode(o != nullptr, store, [&](auto output, auto keep) {
    constexpr bool kOutput = decltype(output)::value, kStore = decltype(keep)::value;
    if (d.key_dim == 64)
      state_pass<64, 64, kOutput, kStore>(d, in, s, state_in, o, state_out, piece);
    else if (value_block == 32)
      state_pass<128, 32, kOutput, kStore>(d, in, s, state_in, o, state_out, piece);
    else if (value_block == 64)
      state_pass<128, 64, kOutput, kStore>(d, in, s, state_in, o, state_out, piece);
    else
      state_pass<128, 128, kOutput, kStore>(d, in, s, state_in, o, state_out, piece);
  });
}

std::vector<ChunkRange> forward_pieces(const GatedDeltaDims& d, int value_block, int requested) {
  const int chunks = int(chunks_of(d));
  int count = requested;
  if (count <= 0)
    count = leaves_half_the_sms_idle(d.batch * d.heads * (d.value_dim / value_block)) && chunks >= 8 ? 4 : 1;
  count = std::max(1, std::min(count, chunks));
  std::vector<ChunkRange> pieces;
  for (int i = 0; i < count; ++i) pieces.push_back({chunks * i / count, chunks * (i + 1) / count});
  return pieces;
}

}  // namespace primer::ops::cuda_ops::gdr

namespace primer::ops::cuda_ops {

size_t gated_delta_rule_workspace_bytes(const GatedDeltaDims& d, bool backward, bool raw_keys) {
  gdr::Scratch s;
  return gdr::carve_scratch(d, backward, raw_keys, nullptr, &s);
}

// The state passes walk the chunks in order, one block per (value slice, head, sequence), bound by per-chunk latency:
// 64 value columns per block beat 128 (twice the blocks; 0.23 vs 0.37 ms for the forward pass at B·H = 64 on an
// H100), and where 64 would leave half the SMs idle (B = 1 at long T) 32 beat 64 (3.17 vs 4.06 ms forward + backward
// at B 1, T 16384, H 16). Each block still reads whole key-wide tiles, so 32 costs L2 traffic that pays only while SMs
// would idle (2.22 vs 2.02 ms at B 4, H 16; docs/perf.md).
int gated_delta_rule_default_value_block(const GatedDeltaDims& d) {
  return d.key_dim == 128 && leaves_half_the_sms_idle(d.batch * d.heads * (d.value_dim / 64)) ? 32 : 64;
}

std::vector<GatedDeltaKernel> gated_delta_rule_forward_kernels(const GatedDeltaDims& d, const void* q, const void* k,
                                                               const void* v, const float* g, const float* beta,
                                                               const float* state_in, void* o, float* state_out,
                                                               void* workspace, const GatedDeltaConfig& config) {
  if (d.time == 0) {  // nothing to read: the state passes through
    const size_t bytes = size_t(d.batch * d.heads * d.key_dim * d.value_dim) * sizeof(float);
    return {{"state copy", [=] {
               if (state_out && state_in)
                 PRIMER_CUDA_CHECK(
                     cudaMemcpyAsync(state_out, state_in, bytes, cudaMemcpyDeviceToDevice, cuda::stream()));
               else if (state_out)
                 PRIMER_CUDA_CHECK(cudaMemsetAsync(state_out, 0, bytes, cuda::stream()));
             }}};
  }
  gdr::Scratch s;
  const bool keep = config.keep_scratch;
  gdr::carve_scratch(d, keep, config.raw_keys(), workspace, &s);
  const gdr::Inputs in{static_cast<const gdr::bf16*>(q),
                       static_cast<const gdr::bf16*>(k),
                       static_cast<const gdr::bf16*>(v),
                       g,
                       beta,
                       int(d.kv_group())};
  const gdr::Inputs scaled = gdr::scaled_inputs(in, s);
  const int value_block = config.value_block ? config.value_block : gated_delta_rule_default_value_block(d);
  const float eps = config.raw_key_eps;
  const std::vector<gdr::ChunkRange> pieces = gdr::forward_pieces(d, value_block, config.forward_pieces);
  const auto prep = [=](gdr::ChunkRange piece) { gdr::launch_chunk_prep(d, in, s, eps, piece); };
  std::vector<GatedDeltaKernel> kernels{{"chunk prep", [=] { prep(pieces[0]); }}};
  for (size_t j = 0; j < pieces.size(); ++j) {
    // Between pieces the state waits in the scratch (each CTA reads and writes only its own columns of it).
    const float* from = j == 0 ? state_in : s.piece_state;
    float* to = j + 1 == pieces.size() ? state_out : s.piece_state;
    const auto pass = [=] {
      gdr::launch_state_pass(d, scaled, s, from, static_cast<gdr::bf16*>(o), to, value_block, keep, pieces[j]);
    };
    if (j + 1 == pieces.size())
      kernels.push_back({keep ? "state pass + output + stored states" : "state pass + output", pass});
    else  // the pass on run_beside's second stream, whose blocks are placed first
      kernels.push_back({keep ? "state pass + output + stored states, beside the next piece's chunk prep"
                              : "state pass + output, beside the next piece's chunk prep",
                         [=] { cuda::run_beside([=] { prep(pieces[j + 1]); }, pass); }});
  }
  return kernels;
}

void gated_delta_rule_forward(const GatedDeltaDims& d, const void* q, const void* k, const void* v, const float* g,
                              const float* beta, const float* state_in, void* o, float* state_out, void* workspace,
                              const GatedDeltaConfig& config) {
  for (const GatedDeltaKernel& kernel :
       gated_delta_rule_forward_kernels(d, q, k, v, g, beta, state_in, o, state_out, workspace, config))
    kernel.launch();
}

}  // namespace primer::ops::cuda_ops
