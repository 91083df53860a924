// Gated DeltaNet-2's chunked forward on CUDA in two kernels (gated_delta_rule2_chunked_kernels.cuh has the maths):
//  1. chunk prep, one CTA per (chunk, head, batch): cp.async loads of q, k, v and g; the in-chunk cumulative decay per
//     channel; T and P by blocks of 16 rows on tensor cores from operands scaled to a reference row inside the block
//     (exactly per pair for a block whose decay range would not fit bf16: a warp per row, lanes over channels);
//     A = (I + T)⁻¹ by forward substitution in fp32 while the other warps form e^G⊙b⊙k, w⊙v, Q̃ and K̃; Y and Ū on
//     tensor cores.
//  2. the state pass, one CTA per (64 value columns, head, batch) walking the chunks in order with its slice of the
//     fp32 state in registers, the next chunk's tiles arriving by cp.async while this one computes:
//     R = Ū − Y S, o = Q̃ S + P R, S ← Diag(e^{G_c}) S + K̃ᵀ R. The backward's recompute stores the chunk-start
//     states and R instead of o.
// The structure is Gated DeltaNet's (gated_delta_rule_forward.cu); what differs is the decay on each key channel,
// which moves from row scalings of the products into their operands.
#include <algorithm>
#include <type_traits>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/gated_delta_rule2_chunked.h"
#include "core/ops/cuda/gated_delta_rule2_chunked_kernels.cuh"
#include "core/ops/cuda/pass_mode.h"
#include "core/ops/cuda/tile/block_reduce.cuh"
#include "core/ops/cuda/tile/unit_lower_inverse.cuh"
#include "core/ops/cuda/tile/warp_mma.cuh"

namespace primer::ops::cuda_ops::gdr2 {
namespace {

using namespace tile;

constexpr int kValueBlock = 64;  // value columns per CTA of the state pass
// The prep runs one CTA per SM (its tiles take most of shared memory), so it brings 16 warps instead of 8 to hide
// its latencies.
constexpr int kPrepThreads = 512;

template <int D> struct PrepLayout {
  static constexpr int kTile = kChunk * D;
  static constexpr int kGStride = D + 4;  // fp32 row stride of G
  static constexpr int kLStride = 68;     // fp32 row stride of T: 16-byte aligned rows for float4 reads
  // q, k, v; the scaled left operands of T and P as hi + lo pairs (the his later e^G⊙b⊙k and w⊙v); the scaled
  // keys; A.
  static constexpr int kHalves = 7 * kTile + kKeyRows * D + kChunk * kChunk;
  static constexpr size_t kBytes = kHalves * sizeof(bf16) + (kChunk * kGStride + kChunk * kLStride) * sizeof(float);
};

__device__ __forceinline__ void put_pair(bf16* tile_base, int offset, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(tile_base + offset) = __floats2bfloat162_rn(x, y);
}

template <int D> __global__ void __launch_bounds__(kPrepThreads) chunk_prep_kernel(Sizes sz, Inputs in, Scratch s) {
  cuda::await_prior_grid();
  using Ly = PrepLayout<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + Ly::kTile;
  bf16* sV = sK + Ly::kTile;
  bf16* sLq = sV + Ly::kTile;     // q_r e^{G_r − G_ref}, then w ⊙ v
  bf16* sLb = sLq + Ly::kTile;    // b_r k_r e^{G_r − G_ref}, then e^G ⊙ b ⊙ k
  bf16* sLqLo = sLb + Ly::kTile;  // the low parts: the left operands carry ~16 bits, so that T and P round once
  bf16* sLbLo = sLqLo + Ly::kTile;
  bf16* sKr = sLbLo + Ly::kTile;  // k_s e^{G_ref − G_s}, per reference
  bf16* sA = sKr + kKeyRows * D;
  float* sG = reinterpret_cast<float*>(sA + kChunk * kChunk);
  float* sL = sG + kChunk * Ly::kGStride;

  static_assert(Ly::kTile / 2 % kPrepThreads == 0, "the scaled operands' loop gives every thread the same pairs");
  const int n = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int t0 = n * kChunk, valid = min(kChunk, sz.T - t0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t in_row = (int64_t(b) * sz.T + t0) * sz.H + h;  // (b, t0, h) in [B, T, H]
  const int64_t row_stride = int64_t(sz.H) * D;
  const int64_t bh = int64_t(b) * sz.H + h;
  const int64_t crow = bh * int64_t(sz.chunks) * kChunk + t0;  // scratch row of token t0

  tile::load_tile_async<kChunk, D, kPrepThreads>(sQ, in.q + in_row * D, row_stride, valid);
  tile::load_tile_async<kChunk, D, kPrepThreads>(sK, in.k + in_row * D, row_stride, valid);
  tile::load_tile_async<kChunk, D, kPrepThreads>(sV, in.v + in_row * D, row_stride, valid);
  load_decay_async<D, Ly::kGStride, kPrepThreads>(sG, in.g + in_row * D, row_stride, valid);
  tile::cp_async_commit();
  tile::cp_async_wait<0>();
  __syncthreads();
  scan_decay<D, Ly::kGStride>(sG);
  __syncthreads();

  auto G = [&](int r, int i) { return sG[r * Ly::kGStride + i]; };
  auto gate_pair = [&](const float* x, int r, int i) {  // (x[r][i], x[r][i + 1]) of a [B, T, H, D] gate; 0 past T
    return r < valid ? __ldg(reinterpret_cast<const float2*>(x + (in_row + int64_t(r) * sz.H) * D + i))
                     : make_float2(0, 0);
  };

  // Which blocks take the reference scaling (the others are summed exactly below).
  __shared__ bool fits[kBlocks];
  if (warp < kBlocks) {
    const bool ok = block_fits<D, Ly::kGStride>(sG, warp, lane);
    if (lane == 0) fits[warp] = ok;
  }
  // The scaled operands: block m's rows q and b⊙k against its reference, and every key up to block m's end against
  // each reference from its own block's on.
#pragma unroll 4
  for (int it = 0; it < Ly::kTile / 2 / kPrepThreads; ++it) {
    const int idx = threadIdx.x + it * kPrepThreads;
    const int r = 2 * idx / D, i = 2 * idx % D, m = r / kBlock;
    const float2 q = tile_pair<D>(sQ, r, i), k = tile_pair<D>(sK, r, i), bb = gate_pair(in.b, r, i);
    const float g0 = G(r, i), g1 = G(r, i + 1);
    const float f0 = exp2f(g0 - G(ref_row(m), i)), f1 = exp2f(g1 - G(ref_row(m), i + 1));
    put_split(sLq, sLqLo, swizzle<D>(r, i), q.x * f0, q.y * f1);
    put_split(sLb, sLbLo, swizzle<D>(r, i), bb.x * k.x * f0, bb.y * k.y * f1);
    for (int mm = m; mm < kBlocks; ++mm)
      put_pair(sKr, swizzle<D>(key_offset(mm) + r, i), k.x * exp2f(G(ref_row(mm), i) - g0),
               k.y * exp2f(G(ref_row(mm), i + 1) - g1));
  }
  __syncthreads();

  // T (strictly lower) and P (lower with the diagonal) of the fitting blocks on tensor cores; a warp owns 16 rows ×
  // 16·kBlocksPerWarp columns.
  {
    constexpr int kBlocksPerWarp = kBlocks * kBlocks / (kPrepThreads / 32);
    static_assert(kBlocksPerWarp >= 1 && kBlocks * kBlocks == kBlocksPerWarp * (kPrepThreads / 32), "16 × 16 blocks");
    const int m = warp % kBlocks, wn = warp / kBlocks;
    if (fits[m]) {
      float accT[2 * kBlocksPerWarp][4], accP[2 * kBlocksPerWarp][4];
      zero(accT);
      zero(accP);
      const bf16* keys = sKr + key_offset(m) * D;
#pragma unroll
      for (int j = 0; j < kBlocksPerWarp; ++j) {
        const int nb = kBlocksPerWarp * wn + j;
        if (nb > m) continue;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          uint32_t bk[4];
          load_b_pair_nk<D>(bk, keys, kBlock * nb, kk * 16, lane);
#pragma unroll
          for (int part = 0; part < 2; ++part) {
            uint32_t ab[4], aq[4];
            load_a<D>(ab, part ? sLbLo : sLb, kBlock * m, kk * 16, lane);
            load_a<D>(aq, part ? sLqLo : sLq, kBlock * m, kk * 16, lane);
            mma_bf16(accT[2 * j], ab, bk[0], bk[1]);
            mma_bf16(accT[2 * j + 1], ab, bk[2], bk[3]);
            mma_bf16(accP[2 * j], aq, bk[0], bk[1]);
            mma_bf16(accP[2 * j + 1], aq, bk[2], bk[3]);
          }
        }
      }
      const int m0 = kBlock * m, n0 = kBlock * kBlocksPerWarp * wn;
      for_each_pair(accT, m0, n0, lane, [&](int r, int c, float v0, float v1) {
        sL[r * Ly::kLStride + c] = c < r ? v0 : 0.f;
        sL[r * Ly::kLStride + c + 1] = c + 1 < r ? v1 : 0.f;
      });
      for_each_pair(accP, m0, n0, lane, [&](int r, int c, float v0, float v1) {
        *reinterpret_cast<uint32_t*>(s.P + (crow + r) * kChunk + c) =
            pack_bf16(c <= r ? sz.scale * v0 : 0.f, c + 1 <= r ? sz.scale * v1 : 0.f);
      });
    }
  }

  // The other blocks' rows exactly: a warp per row r, its lanes over the channels, one key s ≤ r at a time.
  {
    constexpr int kPerLane = D / 32;
    for (int r = warp; r < kChunk; r += kPrepThreads / 32) {
      if (fits[r / kBlock]) continue;
      float bk[kPerLane], qr[kPerLane], gr[kPerLane];
#pragma unroll
      for (int u = 0; u < kPerLane; ++u) {
        const int i = lane + 32 * u;
        const float k = __bfloat162float(sK[swizzle<D>(r, i)]);
        bk[u] = r < valid ? __ldg(in.b + (in_row + int64_t(r) * sz.H) * D + i) * k : 0.f;
        qr[u] = __bfloat162float(sQ[swizzle<D>(r, i)]);
        gr[u] = G(r, i);
      }
      float t_mine[2] = {0.f, 0.f}, p_mine[2] = {0.f, 0.f};  // keys lane and lane + 32
      for (int key = 0; key <= r; ++key) {
        float t = 0.f, p = 0.f;
#pragma unroll
        for (int u = 0; u < kPerLane; ++u) {
          const int i = lane + 32 * u;
          const float ks = __bfloat162float(sK[swizzle<D>(key, i)]) * exp2f(gr[u] - G(key, i));
          t += bk[u] * ks;
          p += qr[u] * ks;
        }
        t = warp_sum(t);
        p = warp_sum(p);
        if (lane == key % 32) t_mine[key / 32] = t, p_mine[key / 32] = p;
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int c = lane + 32 * half;
        sL[r * Ly::kLStride + c] = c < r ? t_mine[half] : 0.f;
        s.P[(crow + r) * kChunk + c] = __float2bfloat16_rn(c <= r ? sz.scale * p_mine[half] : 0.f);
      }
    }
  }
  __syncthreads();

  if (threadIdx.x < kChunk) {
    // A = (I + T)⁻¹, thread j its column j.
    const int j = threadIdx.x;
    float x[kChunk];
    unit_lower_inverse_column<kChunk, Ly::kLStride>(sL, j, x);
#pragma unroll
    for (int r = 0; r < kChunk; ++r) {
      const bf16 a = __float2bfloat16_rn(x[r]);
      sA[swizzle<kChunk>(r, j)] = a;
      if (s.A) s.A[(crow + r) * kChunk + j] = a;
    }
  } else {
    // Meanwhile: E = e^G⊙b⊙k and Z = w⊙v over the scaled operands (read before the last barrier), Q̃ and K̃ to the
    // scratch, and e^{G_c}.
    constexpr int kWorkers = kPrepThreads - kChunk;
#pragma unroll 2
    for (int it = 0; it < (Ly::kTile / 2 + kWorkers - 1) / kWorkers; ++it) {
      const int idx = threadIdx.x - kChunk + it * kWorkers;
      if (idx >= Ly::kTile / 2) break;
      const int r = 2 * idx / D, i = 2 * idx % D;
      const float2 q = tile_pair<D>(sQ, r, i), k = tile_pair<D>(sK, r, i), v = tile_pair<D>(sV, r, i);
      const float2 bb = gate_pair(in.b, r, i), ww = gate_pair(in.w, r, i);
      const float g0 = G(r, i), g1 = G(r, i + 1), c0 = G(kChunk - 1, i), c1 = G(kChunk - 1, i + 1);
      const float e0 = exp2f(g0), e1 = exp2f(g1);
      put_pair(sLb, swizzle<D>(r, i), e0 * bb.x * k.x, e1 * bb.y * k.y);
      put_pair(sLq, swizzle<D>(r, i), ww.x * v.x, ww.y * v.y);
      const int64_t at = (crow + r) * D + i;
      *reinterpret_cast<uint32_t*>(s.Qs + at) = pack_bf16(sz.scale * e0 * q.x, sz.scale * e1 * q.y);
      *reinterpret_cast<uint32_t*>(s.Ks + at) = pack_bf16(exp2f(c0 - g0) * k.x, exp2f(c1 - g1) * k.y);
      if (r == 0)
        *reinterpret_cast<float2*>(s.decay + (bh * sz.chunks + n) * D + i) = make_float2(exp2f(c0), exp2f(c1));
    }
  }
  __syncthreads();

  // Y = A E, Ū = A Z.
  using Grid = WarpGrid<kChunk, D, kPrepThreads / 32>;
  const int m0 = Grid::m0(warp), n0 = Grid::n0(warp);
  bf16* outs[2] = {s.Y, s.Ub};
  const bf16* xs[2] = {sLb, sLq};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float acc[Grid::kTiles][4];
    zero(acc);
    warp_mma<kChunk, Grid::kTiles>(acc, MatA<kChunk>{sA}, MatB<D>{xs[i]}, m0, n0, lane);
    for_each_pair(acc, m0, n0, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<uint32_t*>(outs[i] + (crow + r) * D + c) = pack_bf16(v0, v1);
    });
  }
}

// ---------------------------------------------------------------------------------------------------------------
// State pass.

template <int D, bool kOutput> struct PassLayout {
  static constexpr int BV = kValueBlock;
  static constexpr int kTile = kChunk * D;
  // One stage: Y, K̃ (and Q̃) tiles, the Ū slice (and P), e^{G_c}.
  static constexpr int kStageHalves = 2 * kTile + kChunk * BV + (kOutput ? kTile + kChunk * kChunk : 0);
  static constexpr size_t kStageBytes = kStageHalves * sizeof(bf16) + D * sizeof(float);
  // Two stages, then the bf16 state [D][BV] and R [64][BV].
  static constexpr size_t kBytes = 2 * kStageBytes + (D * BV + kChunk * BV) * sizeof(bf16);
};

// kOutput: write o (and S_T); kStore: write each chunk's starting state and R for the backward.
template <int D, bool kOutput, bool kStore> __global__ void __launch_bounds__(kThreads)
    state_pass_kernel(Sizes sz, Scratch s, const float* state_in, bf16* o, float* state_out) {
  cuda::await_prior_grid();
  constexpr int BV = kValueBlock;
  using Ly = PassLayout<D, kOutput>;
  using GS = WarpGrid<D, BV, kThreads / 32>;       // the state slice [D][BV]
  using GU = WarpGrid<kChunk, BV, kThreads / 32>;  // R and o [64][BV]
  extern __shared__ __align__(128) unsigned char smem[];
  struct Stage {
    bf16 *Y, *K, *U, *Q, *P;
    float* decay;
  };
  auto stage = [&](int i) {  // the two stages' tiles, by arithmetic (an array of them would live in local memory)
    bf16* base = reinterpret_cast<bf16*>(smem + (i & 1) * Ly::kStageBytes);
    bf16* u = base + 2 * Ly::kTile;
    return Stage{base,
                 base + Ly::kTile,
                 u,
                 u + kChunk * BV,
                 u + kChunk * BV + Ly::kTile,
                 reinterpret_cast<float*>(base + Ly::kStageHalves)};
  };
  bf16* sS = reinterpret_cast<bf16*>(smem + 2 * Ly::kStageBytes);
  bf16* sR = sS + D * BV;

  const int col0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = int64_t(b) * sz.H + h;
  const int ms = GS::m0(warp), ns = GS::n0(warp), mu = GU::m0(warp), nu = GU::n0(warp);

  float S[GS::kTiles][4];
  for_each(S, ms, ns, lane,
           [&](int r, int c, float& v) { v = state_in ? state_in[(bh * D + r) * D + col0 + c] : 0.f; });

  auto load = [&](int n, const Stage& st) {
    const int64_t crow = bh * int64_t(sz.chunks) * kChunk + n * kChunk;
    tile::load_tile_async<kChunk, D, kThreads>(st.Y, s.Y + crow * D, D, kChunk);
    tile::load_tile_async<kChunk, D, kThreads>(st.K, s.Ks + crow * D, D, kChunk);
    tile::load_tile_async<kChunk, BV, kThreads>(st.U, s.Ub + crow * D + col0, D, kChunk);
    if constexpr (kOutput) {
      tile::load_tile_async<kChunk, D, kThreads>(st.Q, s.Qs + crow * D, D, kChunk);
      tile::load_tile_async<kChunk, kChunk, kThreads>(st.P, s.P + crow * kChunk, kChunk, kChunk);
    }
    load_floats_async<D>(st.decay, s.decay + (bh * sz.chunks + n) * D);
    tile::cp_async_commit();
  };

  load(0, stage(0));
  for (int n = 0; n < sz.chunks; ++n) {
    const Stage st = stage(n);
    if (n + 1 < sz.chunks) {
      load(n + 1, stage(n + 1));  // that stage was released by the previous iteration's last barrier
      tile::cp_async_wait<1>();
    } else {
      tile::cp_async_wait<0>();
    }
    const int t0 = n * kChunk, valid = min(kChunk, sz.T - t0);
    const int64_t crow = bh * int64_t(sz.chunks) * kChunk + t0;

    store_tile<BV>(sS, S, ms, ns, lane);
    if constexpr (kStore)
      for_each_pair(S, ms, ns, lane, [&](int r, int c, float v0, float v1) {
        *reinterpret_cast<uint32_t*>(s.states + ((bh * sz.chunks + n) * D + r) * D + col0 + c) = pack_bf16(v0, v1);
      });
    __syncthreads();  // the stage has landed for everyone, and sS is complete

    float acc[GU::kTiles][4];
    zero(acc);
    warp_mma<D, GU::kTiles>(acc, MatA<D>{st.Y}, MatB<BV>{sS}, mu, nu, lane);
    for_each_pair(acc, mu, nu, lane, [&](int r, int c, float w0, float w1) {
      const float2 u = tile_pair<BV>(st.U, r, c);
      const float r0 = u.x - w0, r1 = u.y - w1;
      *reinterpret_cast<uint32_t*>(sR + swizzle<BV>(r, c)) = pack_bf16(r0, r1);
      if constexpr (kStore) *reinterpret_cast<uint32_t*>(s.R + (crow + r) * D + col0 + c) = pack_bf16(r0, r1);
    });
    if constexpr (kOutput) {
      zero(acc);
      warp_mma<D, GU::kTiles>(acc, MatA<D>{st.Q}, MatB<BV>{sS}, mu, nu, lane);
    }
    __syncthreads();  // R complete

    if constexpr (kOutput) {
      warp_mma<kChunk, GU::kTiles>(acc, MatA<kChunk>{st.P}, MatB<BV>{sR}, mu, nu, lane);
      for_each_pair(acc, mu, nu, lane, [&](int r, int c, float v0, float v1) {
        if (r < valid)
          *reinterpret_cast<uint32_t*>(o + ((int64_t(b) * sz.T + t0 + r) * sz.H + h) * D + col0 + c) =
              pack_bf16(v0, v1);
      });
    }
    scale_rows(S, ms, lane, [&](int r) { return st.decay[r]; });
    warp_mma<kChunk, GS::kTiles>(S, MatAT<D>{st.K}, MatB<BV>{sR}, ms, ns, lane);
    __syncthreads();  // everyone is done with this stage and with sS, sR
  }
  if (state_out)
    for_each_pair(S, ms, ns, lane, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<float2*>(state_out + (bh * D + r) * D + col0 + c) = make_float2(v0, v1);
    });
}

template <int D> void chunk_prep(const GatedDelta2Shape& d, const Inputs& in, float scale, const Scratch& s) {
  allow_dynamic_smem<chunk_prep_kernel<D>>(PrepLayout<D>::kBytes);
  const dim3 grid(unsigned(chunks_of(d)), unsigned(d.heads), unsigned(d.batch));
  cuda::launch_dependent(chunk_prep_kernel<D>, grid, kPrepThreads, PrepLayout<D>::kBytes, sizes_of(d, scale), in, s);
}

template <int D, bool kOutput, bool kStore> void state_pass(const GatedDelta2Shape& d, float scale, const Scratch& s,
                                                            const float* state_in, bf16* o, float* state_out) {
  using Ly = PassLayout<D, kOutput>;
  constexpr auto kernel = state_pass_kernel<D, kOutput, kStore>;
  allow_dynamic_smem<kernel>(Ly::kBytes);
  const dim3 grid(unsigned(D / kValueBlock), unsigned(d.heads), unsigned(d.batch));
  cuda::launch_dependent(kernel, grid, kThreads, Ly::kBytes, sizes_of(d, scale), s, state_in, o, state_out);
}

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

size_t carve_scratch(const GatedDelta2Shape& d, bool backward, void* base, Scratch* s) {
  const size_t rows = size_t(d.batch * d.heads * chunks_of(d) * kChunk);
  const size_t D = size_t(d.key_dim);
  const size_t states = size_t(d.batch * d.heads * chunks_of(d)) * D * D;
  size_t offset = 0;
  auto take = [&](auto*& ptr, size_t elements, bool wanted) {
    using T = std::remove_reference_t<decltype(*ptr)>;
    ptr = nullptr;
    if (!wanted) return;
    if (base) ptr = reinterpret_cast<T*>(static_cast<unsigned char*>(base) + offset);
    offset += align_up(elements * sizeof(T));
  };
  take(s->Qs, rows * D, true);
  take(s->Ks, rows * D, true);
  take(s->Y, rows * D, true);
  take(s->Ub, rows * D, true);
  take(s->P, rows * kChunk, true);
  take(s->decay, size_t(d.batch * d.heads * chunks_of(d)) * D, true);
  take(s->A, rows * kChunk, backward);
  take(s->R, rows * D, backward);
  take(s->dR, rows * D, backward);
  take(s->states, states, backward);
  take(s->dstates, states, backward);
  return offset;
}

void launch_chunk_prep(const GatedDelta2Shape& d, const Inputs& in, float scale, const Scratch& s) {
  if (d.key_dim == 64)
    chunk_prep<64>(d, in, scale, s);
  else
    chunk_prep<128>(d, in, scale, s);
}

void launch_state_pass(const GatedDelta2Shape& d, float scale, const Scratch& s, const float* state_in, bf16* o,
                       float* state_out, bool store) {
  with_pass_mode(o != nullptr, store, [&](auto output, auto keep) {
    constexpr bool kOutput = decltype(output)::value, kStore = decltype(keep)::value;
    if (d.key_dim == 64)
      state_pass<64, kOutput, kStore>(d, scale, s, state_in, o, state_out);
    else
      state_pass<128, kOutput, kStore>(d, scale, s, state_in, o, state_out);
  });
}

}  // namespace primer::ops::cuda_ops::gdr2

namespace primer::ops::cuda_ops {

bool gated_delta_rule2_chunked_supports(const GatedDelta2Shape& d, DType dtype) {
  return dtype == DType::BF16 && d.key_dim == d.value_dim && (d.key_dim == 64 || d.key_dim == 128);
}

size_t gated_delta_rule2_chunked_workspace_bytes(const GatedDelta2Shape& d, bool backward) {
  gdr2::Scratch s;
  return gdr2::carve_scratch(d, backward, nullptr, &s);
}

void gated_delta_rule2_chunked_forward(const GatedDelta2Shape& d, const void* q, const void* k, const void* v,
                                       const float* g, const float* b, const float* w, const float* state_in,
                                       float scale, void* o, float* state_out, void* workspace, bool keep_scratch) {
  if (d.time == 0) return gdr2::pass_state_through(d, state_in, state_out);
  using gdr2::bf16;
  gdr2::Scratch s;
  gdr2::carve_scratch(d, keep_scratch, workspace, &s);
  const gdr2::Inputs in{static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v), g, b, w};
  gdr2::launch_chunk_prep(d, in, scale, s);
  gdr2::launch_state_pass(d, scale, s, state_in, static_cast<bf16*>(o), state_out, keep_scratch);
}

}  // namespace primer::ops::cuda_ops
