// Chunked GLA backward. One launch runs both sequential passes (gla_scan.cu): the states S_c at chunk starts
// (recomputed) and, in reverse, the gradients dE_c wrt each chunk's final state. Then one block per (chunk, head,
// batch) computes, with A = scale·e^{G_r−G_j}(q_r·k_j) and dA = scale·e^{G_r−G_j}(do_r·v_j) for j ≤ r:
//   dq_r = scale e^{G_r} S_c do_r + Σ_j dA_rj k_j
//   dk_j = e^{G_L−G_j} dE_c v_j + Σ_r dA_rj q_r          dv_j = e^{G_L−G_j} dE_cᵀ k_j + Σ_r A_rj do_r
//   dg_s = Σ_{r≥s} (q_r·dq_r − k_r·dk_r) + ∂/∂G_L,  ∂/∂G_L = e^{G_L}<dE_c, S_c> + Σ_j e^{G_L−G_j} k_jᵀ dE_c v_j
// All tiles arrive by cp.async in two groups: the chunk's inputs, then both boundary states behind phase 1.
// Phase 1: warps 0–3 compute A's row strips, warps 4–7 dA's, into shared memory (bf16). Phases 2–4: warp w owns
// rows 16·(w % 4) … +15 and half w / 4 of the columns of dq, then dk, then dv. The per-row sums for dg are kept
// per warp in shared memory and combined in a fixed order, so dg is deterministic. With a precise query (gla.h) Q,
// the states S_c and the state gradients dE_c arrive as hi + lo tiles, and every product with one of them runs once
// with each half (dO S_cᵀ, V dE_cᵀ, K dE_c, dAᵀ Q, Q Kᵀ; <dE_c, S_c> on the sums); dA is a hi + lo pair as well
// (dA K, dAᵀ Q), formed by all eight warps in phase 1, its residual where A goes, and A formed after phase 3.
#include <type_traits>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/gla.h"
#include "core/ops/cuda/gla_scan.h"
#include "core/ops/cuda/gla_tiles.cuh"
#include "core/ops/cuda/tile/tile_products.cuh"
#include "core/ops/cuda/tile/warp_mma.cuh"
#include "core/ops/cuda/wgmma_available.h"

namespace primer::ops::cuda_ops {
namespace {

using gla::bf16;
using gla::kChunk;
using gla::kThreads;

struct GradArgs {
  const bf16 *dout, *q, *k, *v;
  const bf16* q_lo;  // null unless the query is precise
  const float* g;
  const bf16* states;      // S_c  [B, H, chunks, K, V]
  const bf16* states_lo;   // its residual, for a precise query
  const bf16* dstates;     // dE_c [B, H, chunks, K, V]
  const bf16* dstates_lo;  // its residual, for a precise query
  void *dq, *dk, *dv;
  float* dg;
  float scale;
  int time, heads, chunks;
};

template <int kK, int kV, bool kPrecise> struct GradTraits {
  static constexpr int kSmemBytes =
      (2 * kChunk * (kK + kV) + 2 * kK * kV + 2 * kChunk * kChunk + (kPrecise ? kChunk * kK + 2 * kK * kV : 0)) *
      int(sizeof(bf16));
};

// Per-row dot products of the accumulator block (columns n0 …) with the same block of a shared tile (rows of the
// chunk, kCols wide, laid out as P's tiles), summed over the quad: out[0] for row g, out[1] for row g + 8.
template <class P, int kCols, int kTiles> __device__ __forceinline__ void row_dots(const float (&acc)[kTiles][4],
                                                                                   const bf16* tile, int m0, int n0,
                                                                                   float (&out)[2]) {
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = m0 + gla::frag_row(2 * rr);
    float s = 0;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const float2 x = gla::load_pair(tile + P::template offset<kChunk, kCols>(r, n0 + gla::frag_col(j, 0)));
      s += x.x * acc[j][2 * rr] + x.y * acc[j][2 * rr + 1];
    }
    out[rr] = tile::row_sum(s);
  }
}

template <class T, int kTiles> __device__ __forceinline__ void store_rows(T* base, int64_t row_stride, int m0, int n0,
                                                                          int valid, const float (&acc)[kTiles][4]) {
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = m0 + gla::frag_row(2 * rr);
    gla::store_row(base + r * row_stride + n0, acc, rr, r < valid);
  }
}

template <class T, bool kPrecise, int kK, int kV, class P> __global__ void __launch_bounds__(kThreads)
    gla_grad_kernel(GradArgs a) {
  cuda::await_prior_grid();
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = P::tiles(smem);           // [kChunk][kK]
  bf16* sK = sQ + kChunk * kK;         // [kChunk][kK]
  bf16* sV = sK + kChunk * kK;         // [kChunk][kV]
  bf16* sDO = sV + kChunk * kV;        // [kChunk][kV]
  bf16* sS = sDO + kChunk * kV;        // [kK][kV]  S_c
  bf16* sE = sS + kK * kV;             // [kK][kV]  dE_c
  bf16* sA = sE + kK * kV;             // [kChunk][kChunk]
  bf16* sDA = sA + kChunk * kChunk;    // [kChunk][kChunk]
  bf16* sQlo = sDA + kChunk * kChunk;  // [kChunk][kK], when kPrecise
  bf16* sElo = sQlo + kChunk * kK;     // [kK][kV], when kPrecise
  bf16* sSlo = sElo + kK * kV;         // [kK][kV], when kPrecise
  __shared__ float sG[kChunk];
  __shared__ float sQdq[2][kChunk], sKdk[2][kChunk];  // per column half: q_r·dq_r, k_r·dk_r
  __shared__ float sLast[2][8];                       // per warp: Σ k·dk^state, e^{G_L}<dE, S>

  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // (half from lane 0: a value the compiler knows to be warp-uniform, so that warpgroup MMA under a branch on it is
  // not taken for divergent, which would serialise every wgmma)
  const int strip = warp % 4, half = __shfl_sync(0xffffffffu, warp / 4, 0), m0 = strip * 16;
  const int H = a.heads, t0 = c * kChunk, valid = min(kChunk, a.time - t0);
  const int64_t row0 = int64_t(b) * a.time + t0;
  const int64_t stride_k = int64_t(H) * kK, stride_v = int64_t(H) * kV;
  const int64_t off_k = (row0 * H + h) * kK, off_v = (row0 * H + h) * kV;
  const int64_t off_state = ((int64_t(b) * H + h) * a.chunks + c) * kK * kV;

  // The chunk's inputs first; the two boundary states (needed from phase 2 on) land behind them during phase 1.
  P::template load_async<kChunk, kK, kThreads>(sQ, a.q + off_k, stride_k, valid);
  if constexpr (kPrecise) P::template load_async<kChunk, kK, kThreads>(sQlo, a.q_lo + off_k, stride_k, valid);
  P::template load_async<kChunk, kK, kThreads>(sK, a.k + off_k, stride_k, valid);
  P::template load_async<kChunk, kV, kThreads>(sV, a.v + off_v, stride_v, valid);
  P::template load_async<kChunk, kV, kThreads>(sDO, a.dout + off_v, stride_v, valid);
  tile::cp_async_commit();
  P::template load_async<kK, kV, kThreads>(sS, a.states + off_state, kV, kK);
  P::template load_async<kK, kV, kThreads>(sE, a.dstates + off_state, kV, kK);
  if constexpr (kPrecise) {
    P::template load_async<kK, kV, kThreads>(sElo, a.dstates_lo + off_state, kV, kK);
    P::template load_async<kK, kV, kThreads>(sSlo, a.states_lo + off_state, kV, kK);
  }
  tile::cp_async_commit();
  if (warp == 0) {
    float g_lo, g_hi;
    gla::load_chunk_gates(a.g + row0 * H + h, H, valid, g_lo, g_hi);
    gla::chunk_cumsum_warp(g_lo, g_hi, sG);
  }
  tile::cp_async_wait<1>();
  P::sync();
  const float G_last = sG[kChunk - 1];
  auto to_end = [&](int r) { return __expf(G_last - sG[r]); };

  // Phase 1: A (from Q Kᵀ) and dA (from dO Vᵀ), masked and decayed, to shared memory: rows 16·strip … +15 of the
  // kPairs column tiles of 16 from np_begin, Q as hi + lo where it is precise; with split (std::true_type) the
  // rounding residuals to dst_lo. A warp skips the tiles right of the diagonal (zeros either way, by the mask).
  auto masked_product = [&](const bf16* X, const bf16* X_lo, const bf16* Y, auto cols_tag, auto pairs_tag, int np_begin,
                            bf16* dst, bf16* dst_lo, auto split) {
    constexpr int kCols = decltype(cols_tag)::value, kPairs = decltype(pairs_tag)::value;
    float acc[2 * kPairs][4] = {};
    if constexpr (P::kPerWarp) {
      auto accumulate = [&](const bf16* operand) {
#pragma unroll
        for (int kk = 0; kk < kCols / 16; ++kk) {
          uint32_t af[4];
          tile::load_a<kCols>(af, operand, m0, kk * 16, lane);
#pragma unroll
          for (int p = 0; p < kPairs; ++p) {
            if (np_begin + p > strip) continue;
            uint32_t bf[4];
            tile::load_b_pair_nk<kCols>(bf, Y, (np_begin + p) * 16, kk * 16, lane);
            tile::mma_bf16(acc[2 * p], af, bf[0], bf[1]);
            tile::mma_bf16(acc[2 * p + 1], af, bf[2], bf[3]);
          }
        }
      };
      accumulate(X);
      if (X_lo != nullptr) accumulate(X_lo);
    } else {
      P::template abt_async<kCols, kChunk, kCols, kChunk, kCols>(acc, X, Y, m0, 16 * np_begin, lane);
      if (X_lo != nullptr)
        P::template abt_async<kCols, kChunk, kCols, kChunk, kCols>(acc, X_lo, Y, m0, 16 * np_begin, lane);
      P::template wait<0>(acc);
    }
#pragma unroll
    for (int j = 0; j < 2 * kPairs; ++j) {
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int r = m0 + gla::frag_row(2 * rr), col = 16 * np_begin + gla::frag_col(j, 0);
        const float w0 = col <= r ? a.scale * __expf(sG[r] - sG[col]) * acc[j][2 * rr] : 0.f;
        const float w1 = col + 1 <= r ? a.scale * __expf(sG[r] - sG[col + 1]) * acc[j][2 * rr + 1] : 0.f;
        const int at = P::template offset<kChunk, kChunk>(r, col);
        if constexpr (decltype(split)::value)
          tile::store_pair_split(dst + at, dst_lo + at, w0, w1);
        else
          gla::store_pair(dst + at, w0, w1);
      }
    }
  };
  constexpr auto kKeyCols = std::integral_constant<int, kK>{};
  constexpr auto kValueCols = std::integral_constant<int, kV>{};
  constexpr auto kHalfPairs = std::integral_constant<int, kChunk / 32>{};
  constexpr auto kAllPairs = std::integral_constant<int, kChunk / 16>{};
  // With a precise query, dA is a hi + lo pair too (its residual in sA until phase 4 needs A): dq's and dk's parts
  // within the chunk are sums of dA times k and q, and dg's terms q·dq and k·dk cancel, so one bf16 of dA (2^-9)
  // left the GKA layer's gate gradients up to 5e-2 off f64 (GkaMixerCuda.Bf16LayerAtTheDefaultRidge). Each warp
  // forms half of its strip's column tiles; A follows after phase 3.
  bf16* const sDAlo = sA;
  if constexpr (kPrecise)
    masked_product(sDO, nullptr, sV, kValueCols, kHalfPairs, 2 * half, sDA, sDAlo, std::true_type{});
  else if (half == 0)
    masked_product(sQ, nullptr, sK, kKeyCols, kAllPairs, 0, sA, nullptr, std::false_type{});
  else
    masked_product(sDO, nullptr, sV, kValueCols, kAllPairs, 0, sDA, nullptr, std::false_type{});
  tile::cp_async_wait<0>();  // S_c and dE_c
  P::sync();

  // Phase 2: dq = scale e^{G_r} (dO S_cᵀ) + dA K over columns [n0, n0 + kK/2) of K.
  {
    constexpr int kTiles = kK / 16;
    const int n0 = half * (kK / 2);
    float acc[kTiles][4] = {};
    P::template abt_async<kV, kChunk, kV, kK, kV>(acc, sDO, sS, m0, n0, lane);
    if constexpr (kPrecise) P::template abt_async<kV, kChunk, kV, kK, kV>(acc, sDO, sSlo, m0, n0, lane);
    P::template wait<0>(acc);
    const float scale = a.scale;
    tile::scale_rows(acc, m0, lane, [&](int r) { return scale * __expf(sG[r]); });
    P::template ab<kChunk, kChunk, kChunk, kChunk, kK>(acc, sDA, sK, m0, n0, lane, 0, strip + 1);
    if constexpr (kPrecise)
      P::template ab<kChunk, kChunk, kChunk, kChunk, kK>(acc, sDAlo, sK, m0, n0, lane, 0, strip + 1);
    float dots[2];
    row_dots<P, kK>(acc, sQ, m0, n0, dots);
    if constexpr (kPrecise) {
      float lo_dots[2];
      row_dots<P, kK>(acc, sQlo, m0, n0, lo_dots);
      dots[0] += lo_dots[0];
      dots[1] += lo_dots[1];
    }
    if (lane % 4 == 0) {
      sQdq[half][m0 + gla::frag_row(0)] = dots[0];
      sQdq[half][m0 + gla::frag_row(2)] = dots[1];
    }
    store_rows(static_cast<T*>(a.dq) + off_k, stride_k, m0, n0, valid, acc);
  }

  // Phase 3: dk = e^{G_L−G_j} (V dE_cᵀ) + dAᵀ Q over columns [n0, n0 + kK/2) of K.
  {
    constexpr int kTiles = kK / 16;
    const int n0 = half * (kK / 2);
    float acc[kTiles][4] = {};
    P::template abt_async<kV, kChunk, kV, kK, kV>(acc, sV, sE, m0, n0, lane);
    if constexpr (kPrecise) P::template abt_async<kV, kChunk, kV, kK, kV>(acc, sV, sElo, m0, n0, lane);
    P::template wait<0>(acc);
    tile::scale_rows(acc, m0, lane, to_end);
    float state_dots[2];
    row_dots<P, kK>(acc, sK, m0, n0, state_dots);  // k_j · dk_j^state
    // Each quad holds its two rows' sums: count them once.
    const float state_term = warp_sum(lane % 4 == 0 ? state_dots[0] + state_dots[1] : 0.f);
    if (lane == 0) sLast[0][warp] = state_term;
    P::template atb<kChunk, kChunk, kChunk, kChunk, kK>(acc, sDA, sQ, m0, n0, lane, strip);  // dA_rj = 0 for r < j
    if constexpr (kPrecise) {
      P::template atb<kChunk, kChunk, kChunk, kChunk, kK>(acc, sDA, sQlo, m0, n0, lane, strip);
      P::template atb<kChunk, kChunk, kChunk, kChunk, kK>(acc, sDAlo, sQ, m0, n0, lane, strip);
    }
    float dots[2];
    row_dots<P, kK>(acc, sK, m0, n0, dots);
    if (lane % 4 == 0) {
      sKdk[half][m0 + gla::frag_row(0)] = dots[0];
      sKdk[half][m0 + gla::frag_row(2)] = dots[1];
    }
    store_rows(static_cast<T*>(a.dk) + off_k, stride_k, m0, n0, valid, acc);
  }

  if constexpr (kPrecise) {  // A, in place of dA's residual once phases 2 and 3 are done with it
    __syncthreads();
    masked_product(sQ, sQlo, sK, kKeyCols, kHalfPairs, 2 * half, sA, nullptr, std::false_type{});
    P::sync();
  }

  // Phase 4: dv = e^{G_L−G_j} (K dE_c) + Aᵀ dO over columns [n0, n0 + kV/2) of V.
  {
    constexpr int kTiles = kV / 16;
    const int n0 = half * (kV / 2);
    float acc[kTiles][4] = {};
    P::template ab_async<kK, kChunk, kK, kK, kV>(acc, sK, sE, m0, n0, lane);
    if constexpr (kPrecise) P::template ab_async<kK, kChunk, kK, kK, kV>(acc, sK, sElo, m0, n0, lane);
    P::template wait<0>(acc);
    tile::scale_rows(acc, m0, lane, to_end);
    P::template atb<kChunk, kChunk, kChunk, kChunk, kV>(acc, sA, sDO, m0, n0, lane, strip);
    store_rows(static_cast<T*>(a.dv) + off_v, stride_v, m0, n0, valid, acc);
  }

  // e^{G_L} <dE_c, S_c>: both tiles share one swizzle, so the dot runs over their storage in any order.
  {
    float s = 0;
    for (int i = threadIdx.x * 2; i < kK * kV; i += kThreads * 2) {
      float2 x = gla::load_pair(sE + i), y = gla::load_pair(sS + i);
      if constexpr (kPrecise) {
        const float2 x_lo = gla::load_pair(sElo + i), y_lo = gla::load_pair(sSlo + i);
        x.x += x_lo.x;
        x.y += x_lo.y;
        y.x += y_lo.x;
        y.y += y_lo.y;
      }
      s += x.x * y.x + x.y * y.y;
    }
    s = warp_sum(s);
    if (lane == 0) sLast[1][warp] = __expf(G_last) * s;
  }
  __syncthreads();

  // dg_s = ∂/∂G_L + Σ_{r ≥ s} (q_r·dq_r − k_r·dk_r): a suffix sum by warp 0 over rows lane and lane + 32.
  if (warp == 0) {
    float last = 0;
#pragma unroll
    for (int w = 0; w < 8; ++w) last += sLast[0][w] + sLast[1][w];
    auto term = [&](int r) { return (sQdq[0][r] + sQdq[1][r]) - (sKdk[0][r] + sKdk[1][r]); };
    float lo = term(lane), hi = term(lane + 32);
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const float nlo = __shfl_down_sync(0xffffffffu, lo, off), nhi = __shfl_down_sync(0xffffffffu, hi, off);
      if (lane + off < 32) {
        lo += nlo;
        hi += nhi;
      }
    }
    hi += last;
    lo += __shfl_sync(0xffffffffu, hi, 0);
    float* dg = a.dg + row0 * H + h;
    if (lane < valid) dg[int64_t(lane) * H] = lo;
    if (lane + 32 < valid) dg[int64_t(lane + 32) * H] = hi;
  }
}

template <class T, bool kPrecise, int kK, int kV> void launch_grad(const GradArgs& a, int batch) {
  using Tr = GradTraits<kK, kV, kPrecise>;
  auto launch = [&](auto products) {
    using Products = decltype(products);
    constexpr auto kernel = gla_grad_kernel<T, kPrecise, kK, kV, Products>;
    constexpr int kBytes = Tr::kSmemBytes + Products::kAlignmentSlack;
    allow_dynamic_smem<kernel>(kBytes);
    cuda::launch_dependent(kernel, dim3(unsigned(a.chunks), unsigned(a.heads), unsigned(batch)), kThreads, kBytes, a);
  };
  if (wgmma_available())
    launch(tile::GroupProducts{});
  else
    launch(tile::WarpProducts{});
}

template <class T, bool kPrecise> void dispatch_grad(const GradArgs& a, const GlaDims& d) {
  const int batch = int(d.batch);
  if (d.key_dim == 64)
    d.value_dim == 64 ? launch_grad<T, kPrecise, 64, 64>(a, batch) : launch_grad<T, kPrecise, 64, 128>(a, batch);
  else
    d.value_dim == 64 ? launch_grad<T, kPrecise, 128, 64>(a, batch) : launch_grad<T, kPrecise, 128, 128>(a, batch);
}

}  // namespace

void gla_backward(const GlaDims& d, DType out_dtype, const void* dout, GlaQuery q, const void* k, const void* v,
                  const float* g, float scale, const float* state_in, const float* dstate_out, void* dq, void* dk,
                  void* dv, float* dg, float* dstate_in, void* workspace) {
  const bool precise = q.lo != nullptr;
  // S_c, dE_c, then (precise) their residuals.
  const size_t state_elems = gla_forward_workspace_bytes(d, false) / sizeof(bf16);
  bf16* states = static_cast<bf16*>(workspace);
  bf16* dstates = states + state_elems;
  bf16* states_lo = precise ? dstates + state_elems : nullptr;
  bf16* dstates_lo = precise ? dstates + 2 * state_elems : nullptr;
  const GlaScanJob scans[2] = {{k, v, state_in, states, nullptr, false, nullptr, states_lo},
                               {q.hi, dout, dstate_out, dstates, dstate_in, true, q.lo, dstates_lo}};
  gla_state_scans(d, g, scale, scans, 2);
  if (d.batch == 0 || d.heads == 0 || d.time == 0) return;
  auto in = [](const void* p) { return static_cast<const bf16*>(p); };
  const GradArgs a{in(dout),   in(q.hi), in(k), in(v), in(q.lo), g,     states,      states_lo,    dstates,
                   dstates_lo, dq,       dk,    dv,    dg,       scale, int(d.time), int(d.heads), int(gla_chunks(d))};
  PRIMER_CHECK(precise == (out_dtype == DType::F32), "gla_backward: f32 output goes with a precise query, and only it");
  if (precise)
    dispatch_grad<float, true>(a, d);
  else
    dispatch_grad<bf16, false>(a, d);
}

}  // namespace primer::ops::cuda_ops
