// Gated DeltaNet-2's chunked backward on CUDA: the forward's chunk prep again (now also keeping A) and its state pass
// storing the chunk-start states S and R, the latter beside the reverse pass (3., which reads neither; two streams);
// then
//  3. the reverse state pass, one CTA per (64 value columns, head, batch) walking the chunks backwards with its slice
//     of dS = ∂L/∂(state at the chunk's end) in fp32 registers:
//       dR = Pᵀ dO + K̃ dS,   dS ← Diag(e^{G_c}) dS + Q̃ᵀ dO − Yᵀ dR,
//     storing dR and each chunk's dS for the last kernel, and dS after the first chunk as dstate_in;
//  4. the per-chunk gradients, one CTA per (chunk, head, batch), the paper's App. B VJP in the ratio form:
//       dQ̃ = dO Sᵀ,  dP = dO Rᵀ,  dK̃ = R dSᵀ,  dY = −dR Sᵀ,  dE = Aᵀ dY,  dZ = Aᵀ dR,
//       dT = −tril(dE Yᵀ + dZ Ūᵀ, −1)   (the paper's −Aᵀ dA Aᵀ without forming dA),
//     then T's and P's VJPs through their decay ratios, as the forward built them: by blocks of 16 rows, products
//     of operands scaled to a reference row inside the block (row side: Σ_s dT_rs k_s e^{G_r − G_s}; column side:
//     Σ_r dT_rs (b⊙k)_r e^{G_r − G_s}), exact sums per pair for a block whose decay range does not fit. ∂L/∂G is the
//     sum of each operand's gradient times itself (e^G⊙q, e^{G_c − G}⊙k, e^G⊙b⊙k, the ratios' two ends),
//     reverse-cumsummed over the chunk with the state decay's e^{G_c}⊙rowsum(dS⊙S) and K̃'s share at its last row. Each
//     gradient element has one owning thread for the whole kernel, which accumulates it in the f32 output itself (∂L/∂G
//     in shared memory until its cumulative sum): deterministic, no atomics.
#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/gated_delta_rule2_chunked.h"
#include "core/ops/cuda/gated_delta_rule2_chunked_kernels.cuh"
#include "core/ops/cuda/tile/block_reduce.cuh"
#include "core/ops/cuda/tile/warp_mma.cuh"

namespace primer::ops::cuda_ops::gdr2 {
namespace {

using namespace tile;

constexpr int kValueBlock = 64;
// The gradient kernel runs one CTA per SM (its tiles take most of shared memory), so it brings 16 warps instead of 8
// to hide its latencies; each warp then owns 16 rows × D / 4 columns of every per-chunk product.
constexpr int kGradThreads = 512;

// Up to three pairs an epilogue reads per accumulator pair (unused ones stay zero).
struct Gathered {
  float2 a{0.f, 0.f}, b{0.f, 0.f}, c{0.f, 0.f};
};

// ---------------------------------------------------------------------------------------------------------------
// Reverse state pass.

template <int D> struct ReverseLayout {
  static constexpr int BV = kValueBlock;
  static constexpr int kTile = kChunk * D;
  // One stage: Q̃, K̃, Y tiles, the dO slice, P, e^{G_c}.
  static constexpr int kStageHalves = 3 * kTile + kChunk * BV + kChunk * kChunk;
  static constexpr size_t kStageBytes = kStageHalves * sizeof(bf16) + D * sizeof(float);
  // Two stages, then dS [D][BV] in bf16 and −dR [64][BV].
  static constexpr size_t kBytes = 2 * kStageBytes + (D * BV + kChunk * BV) * sizeof(bf16);
};

template <int D> __global__ void __launch_bounds__(kThreads)
    reverse_pass_kernel(Sizes sz, const bf16* dout, Scratch s, const float* dstate_out, float* dstate_in) {
  cuda::await_prior_grid();
  constexpr int BV = kValueBlock;
  using Ly = ReverseLayout<D>;
  using GS = WarpGrid<D, BV, kThreads / 32>;
  using GU = WarpGrid<kChunk, BV, kThreads / 32>;
  extern __shared__ __align__(128) unsigned char smem[];
  struct Stage {
    bf16 *Q, *K, *Y, *dO, *P;
    float* decay;
  };
  auto stage = [&](int i) {
    bf16* base = reinterpret_cast<bf16*>(smem + (i & 1) * Ly::kStageBytes);
    bf16* dO = base + 3 * Ly::kTile;
    return Stage{base, base + Ly::kTile, base + 2 * Ly::kTile,
                 dO,   dO + kChunk * BV, reinterpret_cast<float*>(base + Ly::kStageHalves)};
  };
  bf16* sdS = reinterpret_cast<bf16*>(smem + 2 * Ly::kStageBytes);
  bf16* sdRn = sdS + D * BV;

  const int col0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = int64_t(b) * sz.H + h;
  const int64_t row_stride = int64_t(sz.H) * D;
  const int ms = GS::m0(warp), ns = GS::n0(warp), mu = GU::m0(warp), nu = GU::n0(warp);

  float dS[GS::kTiles][4];
  for_each(dS, ms, ns, lane,
           [&](int r, int c, float& v) { v = dstate_out ? dstate_out[(bh * D + r) * D + col0 + c] : 0.f; });

  auto load = [&](int n, const Stage& st) {
    const int t0 = n * kChunk, valid = min(kChunk, sz.T - t0);
    const int64_t in_row = (int64_t(b) * sz.T + t0) * sz.H + h, crow = bh * int64_t(sz.chunks) * kChunk + t0;
    tile::load_tile_async<kChunk, D, kThreads>(st.Q, s.Qs + crow * D, D, kChunk);
    tile::load_tile_async<kChunk, D, kThreads>(st.K, s.Ks + crow * D, D, kChunk);
    tile::load_tile_async<kChunk, D, kThreads>(st.Y, s.Y + crow * D, D, kChunk);
    tile::load_tile_async<kChunk, BV, kThreads>(st.dO, dout + in_row * D + col0, row_stride, valid);
    tile::load_tile_async<kChunk, kChunk, kThreads>(st.P, s.P + crow * kChunk, kChunk, kChunk);
    load_floats_async<D>(st.decay, s.decay + (bh * sz.chunks + n) * D);
    tile::cp_async_commit();
  };

  load(sz.chunks - 1, stage(0));
  for (int i = 0; i < sz.chunks; ++i) {
    const int n = sz.chunks - 1 - i;
    const Stage st = stage(i);
    if (n > 0) {
      load(n - 1, stage(i + 1));
      tile::cp_async_wait<1>();
    } else {
      tile::cp_async_wait<0>();
    }
    const int64_t crow = bh * int64_t(sz.chunks) * kChunk + n * kChunk;

    store_tile<BV>(sdS, dS, ms, ns, lane);
    for_each_pair(dS, ms, ns, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<uint32_t*>(s.dstates + ((bh * sz.chunks + n) * D + r) * D + col0 + c) = pack_bf16(v0, v1);
    });
    __syncthreads();

    // dR = K̃ dS + Pᵀ dO.
    float acc[GU::kTiles][4];
    zero(acc);
    warp_mma<D, GU::kTiles>(acc, MatA<D>{st.K}, MatB<BV>{sdS}, mu, nu, lane);
    warp_mma<kChunk, GU::kTiles>(acc, MatAT<kChunk>{st.P}, MatB<BV>{st.dO}, mu, nu, lane);
    for_each_pair(acc, mu, nu, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<uint32_t*>(s.dR + (crow + r) * D + col0 + c) = pack_bf16(v0, v1);
      *reinterpret_cast<uint32_t*>(sdRn + swizzle<BV>(r, c)) = pack_bf16(-v0, -v1);
    });
    __syncthreads();

    // dS ← Diag(e^{G_c}) dS + Q̃ᵀ dO + Yᵀ (−dR).
    scale_rows(dS, ms, lane, [&](int r) { return st.decay[r]; });
    warp_mma<kChunk, GS::kTiles>(dS, MatAT<D>{st.Q}, MatB<BV>{st.dO}, ms, ns, lane);
    warp_mma<kChunk, GS::kTiles>(dS, MatAT<D>{st.Y}, MatB<BV>{sdRn}, ms, ns, lane);
    __syncthreads();
  }
  if (dstate_in)
    for_each_pair(dS, ms, ns, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<float2*>(dstate_in + (bh * D + r) * D + col0 + c) = make_float2(v0, v1);
    });
}

// ---------------------------------------------------------------------------------------------------------------
// Per-chunk gradients.

// Column side of T's and P's VJPs: block n's reference scales rows [16n, 64) of b⊙k and of q, stored one block after
// another from col_offset(n) (as many rows as the row side's keys).
__device__ __forceinline__ int col_offset(int n) { return kChunk * n - kBlock * n * (n - 1) / 2; }

template <int D> struct GradLayout {
  static constexpr int kTile = kChunk * D, kSquare = kChunk * kChunk;
  static constexpr int kX = 2 * D * D > 4 * kTile ? 2 * D* D : 4 * kTile;  // S, dS; then Y, Ū, k, q
  // dO, R, dR, dY, then X: the first 6 tiles (dead by the VJP of T and P) then hold the scaled keys (row side), then
  // the scaled b⊙k and q and the plain b⊙k (column side); then A, dP (scaled, masked), dT.
  static constexpr int kHalves = 4 * kTile + kX + 3 * kSquare;
  static_assert(2 * kKeyRows * D + kTile <= 6 * kTile, "the scaled tiles fit where dO .. Ū were");
  static constexpr int kGStride = D + 4;
  // ∂L/∂G of the chunk's rows: every phase adds to it, so it stays here until its reverse cumulative sum (a stride of
  // D + 8 floats puts the 8 rows a warp's float2 accesses touch on distinct banks).
  static constexpr int kDgStride = D + 8;
  // G; per-row-block column sums of K̃'s share of ∂L/∂G_c (4 × D); e^{G_c}⊙rowsum(dS⊙S) (D); ∂L/∂G.
  static constexpr int kFloats = kChunk * kGStride + kBlocks * D + D + kChunk * kDgStride;
  static constexpr size_t kBytes = kHalves * sizeof(bf16) + kFloats * sizeof(float);
};

template <int D> __global__ void __launch_bounds__(kGradThreads)
    chunk_grads_kernel(Sizes sz, Inputs in, const bf16* __restrict__ dout, Scratch s, float* __restrict__ dq,
                       float* __restrict__ dk, bf16* __restrict__ dv, float* __restrict__ dg, float* __restrict__ db,
                       float* __restrict__ dw) {
  cuda::await_prior_grid();
  using Ly = GradLayout<D>;
  using G64 = WarpGrid<kChunk, kChunk, kGradThreads / 32>;
  using GD = WarpGrid<kChunk, D, kGradThreads / 32>;
  static_assert(G64::kWarpsM == kBlocks && GD::kWarpsM == kBlocks, "a warp's 16 rows are one block of T");
  static_assert(Ly::kTile / 2 % kGradThreads == 0, "the scaled tiles' loops give every thread the same pairs");
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sdO = reinterpret_cast<bf16*>(smem);
  bf16* sR = sdO + Ly::kTile;
  bf16* sdR = sR + Ly::kTile;
  bf16* sdY = sdR + Ly::kTile;
  bf16* sX = sdY + Ly::kTile;
  bf16* sA = sX + Ly::kX;
  bf16* sdP = sA + Ly::kSquare;
  bf16* sdT = sdP + Ly::kSquare;
  float* sG = reinterpret_cast<float*>(sdT + Ly::kSquare);
  float* sColG = sG + kChunk * Ly::kGStride;  // [4][D]
  float* sOverlap = sColG + kBlocks * D;      // [D]
  float* sDg = sOverlap + D;                  // [64][kDgStride]
  bf16 *sS = sX, *sdS = sX + D * D;
  bf16 *sY = sX, *sUb = sX + Ly::kTile, *sK = sX + 2 * Ly::kTile, *sQ = sX + 3 * Ly::kTile;
  bf16 *sdE = sdO, *sdZ = sR;  // phase 2
  // The VJP of T and P reads reference-scaled operands as hi + lo bf16 pairs (~16 bits): each pair (r, s) of a block
  // adds its term to ∂L/∂G_r on the row side and subtracts it from ∂L/∂G_s on the column side, products rounded
  // differently, and the reverse cumulative sum keeps only their difference where they straddle a token.
  bf16 *sHi = sdO, *sLo = sdO + kKeyRows * D;  // row side: keys; column side: b⊙k, then q
  bf16* sBK = sdO + 2 * kKeyRows * D;          // column side, exact blocks: b⊙k

  const int n = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int t0 = n * kChunk, valid = min(kChunk, sz.T - t0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = int64_t(b) * sz.H + h;
  const int64_t in_row = (int64_t(b) * sz.T + t0) * sz.H + h, row_stride = int64_t(sz.H) * D;
  const int64_t crow = bh * int64_t(sz.chunks) * kChunk + t0;
  const int64_t state = (bh * sz.chunks + n) * D * D;
  const int m0 = GD::m0(warp), nD = GD::n0(warp), n64 = G64::n0(warp), blk = m0 / kBlock;

  tile::load_tile_async<kChunk, D, kGradThreads>(sdO, dout + in_row * D, row_stride, valid);
  tile::load_tile_async<kChunk, D, kGradThreads>(sR, s.R + crow * D, D, kChunk);
  tile::load_tile_async<D, D, kGradThreads>(sS, s.states + state, D, D);
  tile::load_tile_async<D, D, kGradThreads>(sdS, s.dstates + state, D, D);
  load_decay_async<D, Ly::kGStride, kGradThreads>(sG, in.g + in_row * D, row_stride, valid);
  tile::cp_async_commit();
  tile::load_tile_async<kChunk, D, kGradThreads>(sdR, s.dR + crow * D, D, kChunk);
  tile::load_tile_async<kChunk, kChunk, kGradThreads>(sA, s.A + crow * kChunk, kChunk, kChunk);
  tile::cp_async_commit();
  for (int i = threadIdx.x; i < kBlocks * D; i += kGradThreads) sColG[i] = 0.f;
  tile::cp_async_wait<1>();
  __syncthreads();
  scan_decay<D, Ly::kGStride>(sG);
  __syncthreads();
  __shared__ bool fits[kBlocks];  // the blocks whose VJP takes the reference scaling (the others: exact sums)
  if (warp < kBlocks) {
    const bool ok = block_fits<D, Ly::kGStride>(sG, warp, lane);
    if (lane == 0) fits[warp] = ok;
  }

  auto G = [&](int r, int c) { return sG[r * Ly::kGStride + c]; };
  auto at = [&](int r, int c) { return (in_row + int64_t(r) * sz.H) * D + c; };  // [B, T, H, D] offset
  // Inputs through the read-only path; outputs the kernel itself wrote through plain loads.
  auto bf16_pair = [&](const bf16* x, int r, int c) {
    return __bfloat1622float2(__ldg(reinterpret_cast<const __nv_bfloat162*>(x + at(r, c))));
  };
  auto f32_pair = [&](const float* x, int r, int c) { return __ldg(reinterpret_cast<const float2*>(x + at(r, c))); };
  auto out_pair = [&](const float* x, int r, int c) { return *reinterpret_cast<const float2*>(x + at(r, c)); };
  auto put = [&](float* x, int r, int c, float v0, float v1) {
    *reinterpret_cast<float2*>(x + at(r, c)) = make_float2(v0, v1);
  };
  auto dG = [&](int r, int c) -> float2& { return *reinterpret_cast<float2*>(sDg + r * Ly::kDgStride + c); };
  // apply(r, c, v0, v1, x, j, e) over an accumulator's pairs (elements e, e + 1 of n-tile j) of the valid rows, x =
  // load(r, c) fetched for both rows of an n-tile first: an epilogue's global reads then travel together instead of one
  // round trip after another.
  auto epilogue = [&](auto& acc, int n0, auto&& load, auto&& apply) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < GD::kTiles; ++j) {
      const int c = n0 + 8 * j + 2 * t, r0 = m0 + g, r1 = r0 + 8;
      const Gathered x0 = r0 < valid ? load(r0, c) : Gathered{}, x1 = r1 < valid ? load(r1, c) : Gathered{};
      if (r0 < valid) apply(r0, c, acc[j][0], acc[j][1], x0, j, 0);
      if (r1 < valid) apply(r1, c, acc[j][2], acc[j][3], x1, j, 2);
    }
  };

  // dQ̃ = dO Sᵀ: dq = scale e^G ⊙ dQ̃ (Q̃ carries the scale) and ∂L/∂G += dq ⊙ q. Starts dq and ∂L/∂G (kept in dg).
  {
    float acc[GD::kTiles][4];
    zero(acc);
    warp_mma<D, GD::kTiles>(acc, MatA<D>{sdO}, MatBT<D>{sS}, m0, nD, lane);
    epilogue(
        acc, nD, [&](int r, int c) { return Gathered{bf16_pair(in.q, r, c)}; },
        [&](int r, int c, float v0, float v1, const Gathered& x, int, int) {
          const float d0 = sz.scale * exp2f(G(r, c)) * v0, d1 = sz.scale * exp2f(G(r, c + 1)) * v1;
          put(dq, r, c, d0, d1);
          dG(r, c) = make_float2(d0 * x.a.x, d1 * x.a.y);
        });
  }
  // dK̃ = R dSᵀ: dk = e^{G_c − G} ⊙ dK̃ and ∂L/∂G_r −= dk ⊙ k, ∂L/∂G_c += Σ_r dk ⊙ k. Starts dk.
  {
    float acc[GD::kTiles][4];
    zero(acc);
    warp_mma<D, GD::kTiles>(acc, MatA<D>{sR}, MatBT<D>{sdS}, m0, nD, lane);
    for_each(acc, m0, nD, lane,
             [&](int r, int c, float& v) { v = r < valid ? exp2f(G(kChunk - 1, c) - G(r, c)) * v : 0.f; });
    epilogue(
        acc, nD, [&](int r, int c) { return Gathered{bf16_pair(in.k, r, c)}; },
        [&](int r, int c, float& d0, float& d1, const Gathered& x, int, int) {
          put(dk, r, c, d0, d1);
          float2& g = dG(r, c);
          g.x -= d0 * x.a.x;
          g.y -= d1 * x.a.y;
          d0 *= x.a.x;  // dk ⊙ k, for ∂L/∂G_c
          d1 *= x.a.y;
        });
    accumulate_columns(acc, m0, nD, lane, sColG + blk * D, [](int, int, float v) { return v; });
  }
  // e^{G_c} ⊙ rowsum(dS ⊙ S), a warp per key row.
  for (int i = warp; i < D; i += kGradThreads / 32) {
    float x = 0.f;
    for (int j = 2 * lane; j < D; j += 64) {
      const float2 a = tile_pair<D>(sS, i, j), c = tile_pair<D>(sdS, i, j);
      x += a.x * c.x + a.y * c.y;
    }
    x = warp_sum(x);
    if (lane == 0) sOverlap[i] = exp2f(G(kChunk - 1, i)) * x;
  }
  tile::cp_async_wait<0>();  // dR, A
  __syncthreads();

  // dY = −dR Sᵀ; dP = dO Rᵀ (on and below the diagonal, times scale: P carries it).
  {
    float acc[GD::kTiles][4];
    zero(acc);
    warp_mma<D, GD::kTiles>(acc, MatA<D>{sdR}, MatBT<D>{sS}, m0, nD, lane);
    scale_rows(acc, m0, lane, [](int) { return -1.f; });
    store_tile<D>(sdY, acc, m0, nD, lane);
  }
  {
    float acc[G64::kTiles][4];
    zero(acc);
    warp_mma<D, G64::kTiles>(acc, MatA<D>{sdO}, MatBT<D>{sR}, m0, n64, lane);
    for_each(acc, m0, n64, lane, [&](int r, int c, float& v) { v = c <= r ? sz.scale * v : 0.f; });
    store_tile<kChunk>(sdP, acc, m0, n64, lane);
  }
  __syncthreads();  // S, dS, dO and R are dead: X takes Y, Ū, k, q

  tile::load_tile_async<kChunk, D, kGradThreads>(sY, s.Y + crow * D, D, kChunk);
  tile::load_tile_async<kChunk, D, kGradThreads>(sUb, s.Ub + crow * D, D, kChunk);
  tile::load_tile_async<kChunk, D, kGradThreads>(sK, in.k + in_row * D, row_stride, valid);
  tile::load_tile_async<kChunk, D, kGradThreads>(sQ, in.q + in_row * D, row_stride, valid);
  tile::cp_async_commit();

  // dE = Aᵀ dY: d(b⊙k) = e^G ⊙ dE (kept in db until the end), ∂L/∂G += d(b⊙k) ⊙ b⊙k.
  {
    float acc[GD::kTiles][4];
    zero(acc);
    warp_mma<kChunk, GD::kTiles>(acc, MatAT<kChunk>{sA}, MatB<D>{sdY}, m0, nD, lane);
    store_tile<D>(sdE, acc, m0, nD, lane);
    epilogue(
        acc, nD,
        [&](int r, int c) {
          return Gathered{bf16_pair(in.k, r, c), f32_pair(in.b, r, c)};
        },
        [&](int r, int c, float v0, float v1, const Gathered& x, int, int) {
          const float d0 = exp2f(G(r, c)) * v0, d1 = exp2f(G(r, c + 1)) * v1;
          put(db, r, c, d0, d1);
          float2& g = dG(r, c);
          g.x += d0 * x.b.x * x.a.x;
          g.y += d1 * x.b.y * x.a.y;
        });
  }
  // dZ = Aᵀ dR: dv = w ⊙ dZ, dw = v ⊙ dZ.
  {
    float acc[GD::kTiles][4];
    zero(acc);
    warp_mma<kChunk, GD::kTiles>(acc, MatAT<kChunk>{sA}, MatB<D>{sdR}, m0, nD, lane);
    store_tile<D>(sdZ, acc, m0, nD, lane);
    epilogue(
        acc, nD,
        [&](int r, int c) {
          return Gathered{bf16_pair(in.v, r, c), f32_pair(in.w, r, c)};
        },
        [&](int r, int c, float v0, float v1, const Gathered& x, int, int) {
          *reinterpret_cast<uint32_t*>(dv + at(r, c)) = pack_bf16(x.b.x * v0, x.b.y * v1);
          put(dw, r, c, x.a.x * v0, x.a.y * v1);
        });
  }
  tile::cp_async_wait<0>();
  __syncthreads();

  // dT = −(dE Yᵀ + dZ Ūᵀ), strictly below the diagonal.
  {
    float acc[G64::kTiles][4];
    zero(acc);
    warp_mma<D, G64::kTiles>(acc, MatA<D>{sdE}, MatBT<D>{sY}, m0, n64, lane);
    warp_mma<D, G64::kTiles>(acc, MatA<D>{sdZ}, MatBT<D>{sUb}, m0, n64, lane);
    for_each(acc, m0, n64, lane, [&](int r, int c, float& v) { v = c < r ? -v : 0.f; });
    store_tile<kChunk>(sdT, acc, m0, n64, lane);
  }
  __syncthreads();  // dO .. Ū are dead: the scaled tiles of T's and P's VJPs go there

  auto tri = [](const bf16* t, int r, int c) { return __bfloat162float(t[swizzle<kChunk>(r, c)]); };
  // Row side: d(b⊙k)_r += Σ_{s<r} dT_rs k_s e^{G_r − G_s}, dq_r += Σ_{s≤r} dP_rs k_s e^{G_r − G_s};
  // ∂L/∂G_r += b⊙k ⊙ the first + q ⊙ the second. Keys scaled to each block's reference first.
#pragma unroll 1
  for (int it = 0; it < Ly::kTile / 2 / kGradThreads; ++it) {
    const int idx = threadIdx.x + it * kGradThreads;
    const int r = 2 * idx / D, i = 2 * idx % D;
    const float2 k = tile_pair<D>(sK, r, i);
    const float g0 = G(r, i), g1 = G(r, i + 1);
    for (int mm = r / kBlock; mm < kBlocks; ++mm)
      put_split(sHi, sLo, swizzle<D>(key_offset(mm) + r, i), k.x * exp2f(G(ref_row(mm), i) - g0),
                k.y * exp2f(G(ref_row(mm), i + 1) - g1));
  }
  __syncthreads();
  {
    float aT[GD::kTiles][4], aP[GD::kTiles][4];
    zero(aT);
    zero(aP);
    if (fits[blk]) {
      for (int kk = 0; kk <= blk; ++kk) {
        uint32_t fT[4], fP[4];
        load_a<kChunk>(fT, sdT, m0, kk * 16, lane);
        load_a<kChunk>(fP, sdP, m0, kk * 16, lane);
#pragma unroll
        for (int part = 0; part < 2; ++part) {
          const bf16* keys = (part ? sLo : sHi) + key_offset(blk) * D;
#pragma unroll
          for (int np = 0; np < GD::kTiles / 2; ++np) {
            uint32_t bk[4];
            load_b_pair_kn<D>(bk, keys, nD + np * 16, kk * 16, lane);
            mma_bf16(aT[2 * np], fT, bk[0], bk[1]);
            mma_bf16(aT[2 * np + 1], fT, bk[2], bk[3]);
            mma_bf16(aP[2 * np], fP, bk[0], bk[1]);
            mma_bf16(aP[2 * np + 1], fP, bk[2], bk[3]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < GD::kTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = m0 + lane / 4 + 8 * (e >> 1), c = nD + 8 * j + 2 * (lane % 4) + (e & 1);
          const float f = exp2f(G(r, c) - G(ref_row(blk), c));
          aT[j][e] *= f;
          aP[j][e] *= f;
        }
    } else {  // exact sums, one element at a time: a rolled loop keeps this rare path small
#pragma unroll 1
      for (int idx = 0; idx < 4 * GD::kTiles; ++idx) {
        const int2 at_rc = element_at(idx, m0, nD, lane);
        const int r = at_rc.x, c = at_rc.y;
        const float gr = G(r, c);
        float t = 0.f, p = 0.f;
        for (int key = 0; key <= r; ++key) {
          const float ks = __bfloat162float(sK[swizzle<D>(key, c)]) * exp2f(gr - G(key, c));
          t += tri(sdT, r, key) * ks;
          p += tri(sdP, r, key) * ks;
        }
        set_element(aT, idx, t);
        set_element(aP, idx, p);
      }
    }
    epilogue(
        aT, nD,
        [&](int r, int c) {
          return Gathered{f32_pair(in.b, r, c), out_pair(db, r, c), out_pair(dq, r, c)};
        },
        [&](int r, int c, float t0_, float t1, const Gathered& x, int j, int e) {
          const float p0 = aP[j][e], p1 = aP[j][e + 1];
          const float2 k = tile_pair<D>(sK, r, c), q = tile_pair<D>(sQ, r, c);
          put(db, r, c, x.b.x + t0_, x.b.y + t1);
          put(dq, r, c, x.c.x + p0, x.c.y + p1);
          float2& g = dG(r, c);
          g.x += x.a.x * k.x * t0_ + q.x * p0;
          g.y += x.a.y * k.y * t1 + q.y * p1;
        });
  }
  __syncthreads();  // the row side's keys are dead

  // Column side: dk_s += Σ_{r≥s} (dT_rs (b⊙k)_r + dP_rs q_r) e^{G_r − G_s}; ∂L/∂G_s −= k ⊙ that. Then the end of
  // d(b⊙k): db = d(b⊙k) ⊙ k, dk += d(b⊙k) ⊙ b. In two passes over the same tiles: b⊙k with dT, then q with dP, each
  // scaled to every block's reference from its own block on (rows [16n, 64) for block n).
  {
    float acc[GD::kTiles][4];
    zero(acc);
#pragma unroll 1
    for (int pass = 0; pass < 2; ++pass) {
#pragma unroll 1
      for (int it = 0; it < Ly::kTile / 2 / kGradThreads; ++it) {
        const int idx = threadIdx.x + it * kGradThreads;
        const int r = 2 * idx / D, i = 2 * idx % D;
        float2 x;
        if (pass == 0) {
          const float2 k = tile_pair<D>(sK, r, i);
          const float2 bb = r < valid ? f32_pair(in.b, r, i) : make_float2(0.f, 0.f);
          x = make_float2(bb.x * k.x, bb.y * k.y);
          *reinterpret_cast<uint32_t*>(sBK + swizzle<D>(r, i)) = pack_bf16(x.x, x.y);
        } else {
          x = tile_pair<D>(sQ, r, i);
        }
        const float g0 = G(r, i), g1 = G(r, i + 1);
        for (int nb = 0; nb <= r / kBlock; ++nb)
          put_split(sHi, sLo, swizzle<D>(col_offset(nb) + r - kBlock * nb, i), x.x * exp2f(g0 - G(ref_row(nb), i)),
                    x.y * exp2f(g1 - G(ref_row(nb), i + 1)));
      }
      __syncthreads();
      if (fits[blk]) {
        for (int kk = blk; kk < kBlocks; ++kk) {
          uint32_t fM[4];
          load_a_transposed<kChunk>(fM, pass ? sdP : sdT, m0, kk * 16, lane);
          const int row0 = col_offset(blk) + kBlock * (kk - blk);
#pragma unroll
          for (int part = 0; part < 2; ++part)
#pragma unroll
            for (int np = 0; np < GD::kTiles / 2; ++np) {
              uint32_t bx[4];
              load_b_pair_kn<D>(bx, part ? sLo : sHi, nD + np * 16, row0, lane);
              mma_bf16(acc[2 * np], fM, bx[0], bx[1]);
              mma_bf16(acc[2 * np + 1], fM, bx[2], bx[3]);
            }
        }
      } else if (pass == 0) {  // the exact sums of both terms at once, one element at a time (rolled, as above)
#pragma unroll 1
        for (int idx = 0; idx < 4 * GD::kTiles; ++idx) {
          const int2 at_rc = element_at(idx, m0, nD, lane);
          const int s_row = at_rc.x, c = at_rc.y;
          const float gs = G(s_row, c);
          float x = 0.f;
          for (int r = s_row; r < kChunk; ++r)
            x += (tri(sdT, r, s_row) * __bfloat162float(sBK[swizzle<D>(r, c)]) +
                  tri(sdP, r, s_row) * __bfloat162float(sQ[swizzle<D>(r, c)])) *
                 exp2f(G(r, c) - gs);
          set_element(acc, idx, x);
        }
      }
      __syncthreads();  // the pass's tiles are dead
    }
    if (fits[blk])
      for_each(acc, m0, nD, lane, [&](int row, int c, float& v) { v *= exp2f(G(ref_row(blk), c) - G(row, c)); });
    epilogue(
        acc, nD,
        [&](int r, int c) {
          return Gathered{f32_pair(in.b, r, c), out_pair(db, r, c), out_pair(dk, r, c)};
        },
        [&](int r, int c, float x0, float x1, const Gathered& x, int, int) {
          const float2 k = tile_pair<D>(sK, r, c);
          put(dk, r, c, x.c.x + x0 + x.b.x * x.a.x, x.c.y + x1 + x.b.y * x.a.y);
          float2& g = dG(r, c);
          g.x -= k.x * x0;
          g.y -= k.y * x1;
          put(db, r, c, x.b.x * k.x, x.b.y * k.y);
        });
  }
  __syncthreads();  // every row's ∂L/∂G is complete

  // g's gradient: Σ over the rows r ≥ t of its chunk of ∂L/∂G_r, starting from ∂L/∂G_c (the last row's G, which the
  // state's decay and K̃ read; padded rows add nothing else); then the valid rows out in rows of float4.
  for (int c = threadIdx.x; c < D; c += kGradThreads) {
    float suffix = sOverlap[c];
    for (int i = 0; i < kBlocks; ++i) suffix += sColG[i * D + c];
    for (int r = valid - 1; r >= 0; --r) {
      suffix += sDg[r * Ly::kDgStride + c];
      sDg[r * Ly::kDgStride + c] = suffix;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < valid * (D / 4); i += kGradThreads) {
    const int r = i / (D / 4), c = 4 * (i % (D / 4));
    *reinterpret_cast<float4*>(dg + at(r, c)) = *reinterpret_cast<const float4*>(sDg + r * Ly::kDgStride + c);
  }
}

template <int D> void reverse_pass(const GatedDelta2Shape& d, float scale, const bf16* dout, const Scratch& s,
                                   const float* dstate_out, float* dstate_in) {
  using Ly = ReverseLayout<D>;
  allow_dynamic_smem<reverse_pass_kernel<D>>(Ly::kBytes);
  const dim3 grid(unsigned(D / kValueBlock), unsigned(d.heads), unsigned(d.batch));
  cuda::launch_dependent(reverse_pass_kernel<D>, grid, kThreads, Ly::kBytes, sizes_of(d, scale), dout, s, dstate_out,
                         dstate_in);
}

template <int D> void chunk_grads(const GatedDelta2Shape& d, float scale, const Inputs& in, const bf16* dout,
                                  const Scratch& s, float* dq, float* dk, bf16* dv, float* dg, float* db, float* dw) {
  allow_dynamic_smem<chunk_grads_kernel<D>>(GradLayout<D>::kBytes);
  const dim3 grid(unsigned(chunks_of(d)), unsigned(d.heads), unsigned(d.batch));
  cuda::launch_dependent(chunk_grads_kernel<D>, grid, kGradThreads, GradLayout<D>::kBytes, sizes_of(d, scale), in, dout,
                         s, dq, dk, dv, dg, db, dw);
}

}  // namespace
}  // namespace primer::ops::cuda_ops::gdr2

namespace primer::ops::cuda_ops {

void gated_delta_rule2_chunked_backward(const GatedDelta2Shape& d, const void* dout, const float* dstate_out,
                                        const void* q, const void* k, const void* v, const float* g, const float* b,
                                        const float* w, const float* state_in, float scale, float* dq, float* dk,
                                        void* dv, float* dg, float* db, float* dw, float* dstate_in, void* workspace,
                                        bool scratch_from_forward) {
  if (d.time == 0) return gdr2::pass_state_through(d, dstate_out, dstate_in);
  using gdr2::bf16;
  gdr2::Scratch s;
  gdr2::carve_scratch(d, true, workspace, &s);
  const gdr2::Inputs in{static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v), g, b, w};
  const auto* dO = static_cast<const bf16*>(dout);
  auto* dv_ = static_cast<bf16*>(dv);
  const auto reverse_pass = [&] {
    if (d.key_dim == 64)
      gdr2::reverse_pass<64>(d, scale, dO, s, dstate_out, dstate_in);
    else
      gdr2::reverse_pass<128>(d, scale, dO, s, dstate_out, dstate_in);
  };
  if (scratch_from_forward) {  // a keeping forward left A, R and the chunk states in place
    reverse_pass();
  } else {
    gdr2::launch_chunk_prep(d, in, scale, s);
    // The recompute of S and R and the reverse pass (which reads neither) each run a CTA per (value block, head,
    // sequence): at long T and small B·H most SMs would idle, so they run at the same time, on two streams.
    cuda::run_beside(reverse_pass, [&] { gdr2::launch_state_pass(d, scale, s, state_in, nullptr, nullptr, true); });
  }
  if (d.key_dim == 64)
    gdr2::chunk_grads<64>(d, scale, in, dO, s, dq, dk, dv_, dg, db, dw);
  else
    gdr2::chunk_grads<128>(d, scale, in, dO, s, dq, dk, dv_, dg, db, dw);
}

}  // namespace primer::ops::cuda_ops
