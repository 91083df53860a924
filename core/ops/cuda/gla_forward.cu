// Chunked GLA forward: the sequential state pass (gla_scan.cu) writes the bf16 state at every chunk start, then
// one block per (chunk, head, batch) computes the chunk's outputs in parallel:
//   o_r = scale · ( e^{G_r} S_cᵀ q_r + Σ_{j≤r} e^{G_r−G_j} (q_r·k_j) v_j )
// Q and K arrive first (one cp.async group), V and S_c behind them while the scores are computed. Warp w owns rows
// 16·(w % 4) … +15 and half w / 4 of the V columns. Its decay-masked scores P = Q Kᵀ stay in registers and feed
// P V directly as mma A fragments; key tiles wholly above the diagonal are skipped. With a precise query (gla.h) Q
// and the chunk-start states arrive as hi + lo tiles: Q Kᵀ runs once with each half of Q, and Q S_c as
// Q_hi S_hi + Q_lo S_hi + Q_hi S_lo.
#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/gla.h"
#include "core/ops/cuda/gla_scan.h"
#include "core/ops/cuda/gla_tiles.cuh"

namespace primer::ops::cuda_ops {
namespace {

using gla::bf16;
using gla::kChunk;
using gla::kThreads;

struct OutputArgs {
  const bf16 *q, *q_lo, *k, *v;  // q_lo: null unless the query is precise
  const float* g;
  const bf16* states;     // [B, H, chunks, K, V]
  const bf16* states_lo;  // their residuals, for a precise query
  void* o;
  float scale;
  int time, heads, chunks;
};

template <int kK, int kV, bool kPrecise> struct OutputTraits {
  static constexpr int kWarpCols = kV / 2, kTiles = kWarpCols / 8;
  static constexpr int kSmemBytes =
      (kChunk * ((kPrecise ? 3 : 2) * kK + kV) + (kPrecise ? 2 : 1) * kK * kV) * int(sizeof(bf16));
};

template <class T, bool kPrecise, int kK, int kV> __global__ void __launch_bounds__(kThreads)
    gla_output_kernel(OutputArgs a) {
  cuda::await_prior_grid();
  using Tr = OutputTraits<kK, kV, kPrecise>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);  // [kChunk][kK]
  bf16* sK = sQ + kChunk * kK;               // [kChunk][kK]
  bf16* sV = sK + kChunk * kK;               // [kChunk][kV]
  bf16* sS = sV + kChunk * kV;               // [kK][kV]
  bf16* sQlo = sS + kK * kV;                 // [kChunk][kK], when kPrecise
  bf16* sSlo = sQlo + kChunk * kK;           // [kK][kV], when kPrecise
  __shared__ float sG[kChunk];

  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int strip = warp % 4, m0 = strip * 16, n0 = (warp / 4) * Tr::kWarpCols;
  const int H = a.heads, t0 = c * kChunk, valid = min(kChunk, a.time - t0);
  const int64_t row0 = int64_t(b) * a.time + t0;  // first token of the chunk in [B·T]
  tile::load_tile_async<kChunk, kK, kThreads>(sQ, a.q + (row0 * H + h) * kK, int64_t(H) * kK, valid);
  if constexpr (kPrecise)
    tile::load_tile_async<kChunk, kK, kThreads>(sQlo, a.q_lo + (row0 * H + h) * kK, int64_t(H) * kK, valid);
  tile::load_tile_async<kChunk, kK, kThreads>(sK, a.k + (row0 * H + h) * kK, int64_t(H) * kK, valid);
  tile::cp_async_commit();
  tile::load_tile_async<kChunk, kV, kThreads>(sV, a.v + (row0 * H + h) * kV, int64_t(H) * kV, valid);
  const int64_t off_state = ((int64_t(b) * H + h) * a.chunks + c) * kK * kV;
  tile::load_tile_async<kK, kV, kThreads>(sS, a.states + off_state, kV, kK);
  if constexpr (kPrecise) tile::load_tile_async<kK, kV, kThreads>(sSlo, a.states_lo + off_state, kV, kK);
  tile::cp_async_commit();
  if (warp == 0) {
    float g_lo, g_hi;
    gla::load_chunk_gates(a.g + row0 * H + h, H, valid, g_lo, g_hi);
    gla::chunk_cumsum_warp(g_lo, g_hi, sG);
  }
  tile::cp_async_wait<1>();  // Q and K
  __syncthreads();

  // P = scale · e^{G_r − G_j} (q_r · k_j) for j ≤ r, else 0: 16 rows × 64 columns of this warp's strip.
  uint32_t qf[kK / 16][4], qf_lo[kPrecise ? kK / 16 : 1][4];
  float p[kChunk / 8][4] = {};
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    tile::load_a<kK>(qf[kk], sQ, m0, kk * 16, lane);
    if constexpr (kPrecise) tile::load_a<kK>(qf_lo[kk], sQlo, m0, kk * 16, lane);
#pragma unroll
    for (int np = 0; np < kChunk / 16; ++np) {
      if (np > strip) continue;  // above the diagonal
      uint32_t bf[4];
      tile::load_b_pair_nk<kK>(bf, sK, np * 16, kk * 16, lane);
      tile::mma_bf16(p[2 * np], qf[kk], bf[0], bf[1]);
      tile::mma_bf16(p[2 * np + 1], qf[kk], bf[2], bf[3]);
      if constexpr (kPrecise) {
        tile::mma_bf16(p[2 * np], qf_lo[kk], bf[0], bf[1]);
        tile::mma_bf16(p[2 * np + 1], qf_lo[kk], bf[2], bf[3]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kChunk / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + gla::frag_row(e), col = gla::frag_col(j, e);
      p[j][e] = col <= r ? a.scale * __expf(sG[r] - sG[col]) * p[j][e] : 0.f;
    }

  // o = scale · e^{G_r} (Q S_c) + P V over this warp's columns.
  tile::cp_async_wait<0>();  // V and S_c
  __syncthreads();
  float o[Tr::kTiles][4] = {};
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk)
#pragma unroll
    for (int np = 0; np < Tr::kTiles / 2; ++np) {
      uint32_t bf[4];
      tile::load_b_pair_kn<kV>(bf, sS, n0 + np * 16, kk * 16, lane);
      tile::mma_bf16(o[2 * np], qf[kk], bf[0], bf[1]);
      tile::mma_bf16(o[2 * np + 1], qf[kk], bf[2], bf[3]);
      if constexpr (kPrecise) {
        tile::mma_bf16(o[2 * np], qf_lo[kk], bf[0], bf[1]);
        tile::mma_bf16(o[2 * np + 1], qf_lo[kk], bf[2], bf[3]);
        tile::load_b_pair_kn<kV>(bf, sSlo, n0 + np * 16, kk * 16, lane);
        tile::mma_bf16(o[2 * np], qf[kk], bf[0], bf[1]);
        tile::mma_bf16(o[2 * np + 1], qf[kk], bf[2], bf[3]);
      }
    }
#pragma unroll
  for (int j = 0; j < Tr::kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] *= a.scale * __expf(sG[m0 + gla::frag_row(e)]);
#pragma unroll
  for (int kk = 0; kk < kChunk / 16; ++kk) {
    if (kk > strip) continue;
    uint32_t pa[4];
    tile::accumulators_to_a<kChunk / 8>(pa, p, kk);
#pragma unroll
    for (int np = 0; np < Tr::kTiles / 2; ++np) {
      uint32_t bf[4];
      tile::load_b_pair_kn<kV>(bf, sV, n0 + np * 16, kk * 16, lane);
      tile::mma_bf16(o[2 * np], pa, bf[0], bf[1]);
      tile::mma_bf16(o[2 * np + 1], pa, bf[2], bf[3]);
    }
  }

  T* out = static_cast<T*>(a.o) + (row0 * H + h) * kV;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = m0 + gla::frag_row(2 * rr);
    gla::store_row(out + int64_t(r) * H * kV + n0, o, rr, r < valid);
  }
}

template <class T, bool kPrecise, int kK, int kV> void launch_output(const OutputArgs& a, int batch) {
  using Tr = OutputTraits<kK, kV, kPrecise>;
  constexpr auto kernel = gla_output_kernel<T, kPrecise, kK, kV>;
  allow_dynamic_smem<kernel>(Tr::kSmemBytes);
  cuda::launch_dependent(kernel, dim3(unsigned(a.chunks), unsigned(a.heads), unsigned(batch)), kThreads, Tr::kSmemBytes,
                         a);
}

template <class T, bool kPrecise> void dispatch_output(const OutputArgs& a, const GlaDims& d) {
  const int batch = int(d.batch);
  if (d.key_dim == 64)
    d.value_dim == 64 ? launch_output<T, kPrecise, 64, 64>(a, batch) : launch_output<T, kPrecise, 64, 128>(a, batch);
  else
    d.value_dim == 64 ? launch_output<T, kPrecise, 128, 64>(a, batch) : launch_output<T, kPrecise, 128, 128>(a, batch);
}

size_t chunk_states_bytes(const GlaDims& d) {
  return size_t(d.batch * d.heads * gla_chunks(d) * d.key_dim * d.value_dim) * sizeof(bf16);
}

}  // namespace

size_t gla_forward_workspace_bytes(const GlaDims& d, bool precise_query) {
  return (precise_query ? 2 : 1) * chunk_states_bytes(d);
}
size_t gla_backward_workspace_bytes(const GlaDims& d, bool precise_query) {
  return (precise_query ? 4 : 2) * chunk_states_bytes(d);
}

void gla_forward(const GlaDims& d, DType out_dtype, GlaQuery q, const void* k, const void* v, const float* g,
                 float scale, const float* state_in, void* o, float* state_out, void* workspace) {
  const bool precise = q.lo != nullptr;
  bf16* states = static_cast<bf16*>(workspace);
  bf16* states_lo = precise ? states + chunk_states_bytes(d) / sizeof(bf16) : nullptr;
  const GlaScanJob scan{k, v, state_in, states, state_out, false, nullptr, states_lo};
  gla_state_scans(d, g, scale, &scan, 1);
  if (d.batch == 0 || d.heads == 0 || d.time == 0) return;
  const OutputArgs a{static_cast<const bf16*>(q.hi),
                     static_cast<const bf16*>(q.lo),
                     static_cast<const bf16*>(k),
                     static_cast<const bf16*>(v),
                     g,
                     states,
                     states_lo,
                     o,
                     scale,
                     int(d.time),
                     int(d.heads),
                     int(gla_chunks(d))};
  PRIMER_CHECK(precise || out_dtype == DType::BF16, "gla_forward: an f32 output goes with a precise query");
  if (!precise)
    dispatch_output<bf16, false>(a, d);
  else if (out_dtype == DType::F32)
    dispatch_output<float, true>(a, d);
  else
    dispatch_output<bf16, true>(a, d);
}

}  // namespace primer::ops::cuda_ops
