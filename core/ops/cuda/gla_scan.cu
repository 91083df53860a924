// The sequential chunk-state pass of chunked GLA (see gla_scan.h). One block of 8 warps per (64- or 32-column slice
// of V, head, batch × job): warps tile the K × slice state as kWarpsM row strips of 16 × kWarpsN column groups and
// keep it in fp32 mma accumulators. Chunks stream through a ring of kStages shared-memory stages by cp.async,
// kStages − 1 chunks ahead of the one being folded in, so the chain of per-chunk updates never waits on global
// memory. The update is one tensor-core product Aᵀ diag(w) B per chunk; the row weights w are applied to the A
// fragments after ldmatrix, so the tiles land in shared memory untouched. A precise launch (gla.h: a precise query)
// keeps every bit it can: a job with a precise a (a_lo) folds in Aᵀ diag(w) B once with each half, the weights go
// onto B (rounding w·a to bf16 would perturb a off its span, which a precise query's products then see), and the
// jobs that ask for it (states_lo) write each boundary state as hi + lo.
#include <type_traits>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/gla_scan.h"
#include "core/ops/cuda/gla_tiles.cuh"
#include "core/ops/cuda/sm_count.h"

namespace primer::ops::cuda_ops {
namespace {

using gla::bf16;
using gla::kChunk;
using gla::kThreads;
struct ScanLaunch {
  GlaScanJob job[2];
  const float* g;
  float scale;
  int batch, time, heads, value_dim, chunks;
};

// kLo: a precise launch, with room for a precise a's residual tile (a job of it may have none).
template <int kK, int kSlice, bool kLo> struct ScanTraits {
  static constexpr int kWarpsM = kK / 16, kWarpsN = 8 / kWarpsM;
  static constexpr int kWarpCols = kSlice / kWarpsN, kTiles = kWarpCols / 8;
  static constexpr int kStages = 4;
  // A tile [kChunk][kK], B tile [kChunk][kSlice], then (kLo) A's residual [kChunk][kK].
  static constexpr int kStageElems = kChunk * ((kLo ? 2 : 1) * kK + kSlice);
  static constexpr int kSmemBytes = kStages * kStageElems * int(sizeof(bf16));
};

// Stores the state s (this warp's fragment) as bf16 at `out`, and its residual at `out_lo` if non-null, 16 bytes a
// lane (tile::store_row_pairs): the scan writes 32 KB of hi + lo state per chunk and block, and its 4-byte stores
// took twice as long (H200, GKA layer: 307 -> 194 us forward, 655 -> 394 us backward).
template <int kTiles> __device__ __forceinline__ void store_state(bf16* out, bf16* out_lo, const float (&s)[kTiles][4],
                                                                  int m0, int n0, int V) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row_at = int64_t(m0 + gla::frag_row(2 * r)) * V + n0;
    gla::store_row(out + row_at, s, r, true);
    if (out_lo)
      tile::store_row_pairs<kTiles>(out_lo + row_at,
                                    [&](int j) { return tile::residual_bf16(s[j][2 * r], s[j][2 * r + 1]); });
  }
}

template <int kK, int kSlice, bool kLo> __global__ void __launch_bounds__(kThreads, 2) gla_scan_kernel(ScanLaunch p) {
  cuda::await_prior_grid();
  using Tr = ScanTraits<kK, kSlice, kLo>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ring = reinterpret_cast<bf16*>(smem);
  __shared__ float sW[kChunk];  // row weights of the chunk being folded in
  __shared__ float sDecay;      // e^{G_L}

  const int v0 = blockIdx.x * kSlice, h = blockIdx.y;
  const int b = blockIdx.z % p.batch;
  const GlaScanJob job = blockIdx.z < p.batch ? p.job[0] : p.job[1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const int m0 = (warp % Tr::kWarpsM) * 16, n0 = (warp / Tr::kWarpsM) * Tr::kWarpCols;
  const int H = p.heads, V = p.value_dim, NC = p.chunks;
  const bf16* A = static_cast<const bf16*>(job.a) + (int64_t(b) * p.time * H + h) * kK;
  const bf16* Bm = static_cast<const bf16*>(job.b) + (int64_t(b) * p.time * H + h) * V + v0;
  const float* g = p.g + int64_t(b) * p.time * H + h;
  const int64_t state_offset = (int64_t(b) * H + h) * kK * V + v0;  // of [B, H, K, V] at column v0
  const bool precise = kLo && job.a_lo != nullptr;
  const bf16* A_lo = precise ? static_cast<const bf16*>(job.a_lo) + (int64_t(b) * p.time * H + h) * kK : nullptr;
  const int64_t states_offset = (int64_t(b) * H + h) * NC * kK * V + v0;
  bf16* states = static_cast<bf16*>(job.states) + states_offset;
  bf16* states_lo = job.states_lo ? static_cast<bf16*>(job.states_lo) + states_offset : nullptr;
  auto chunk_at = [&](int step) { return job.reverse ? NC - 1 - step : step; };

  float s[Tr::kTiles][4];
#pragma unroll
  for (int j = 0; j < Tr::kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = m0 + gla::frag_row(e), col = n0 + gla::frag_col(j, e);
      s[j][e] = job.init ? job.init[state_offset + int64_t(row) * V + col] : 0.f;
    }

  // Starts the copy of the chunk folded in at `step` into its stage; always closes one commit group.
  auto issue = [&](int step) {
    if (step < NC) {
      const int t0 = chunk_at(step) * kChunk, valid = min(kChunk, p.time - t0);
      bf16* stage = ring + (step % Tr::kStages) * Tr::kStageElems;
      tile::load_tile_async<kChunk, kK, kThreads>(stage, A + int64_t(t0) * H * kK, int64_t(H) * kK, valid);
      tile::load_tile_async<kChunk, kSlice, kThreads>(stage + kChunk * kK, Bm + int64_t(t0) * H * V, int64_t(H) * V,
                                                      valid);
      if (precise)
        tile::load_tile_async<kChunk, kK, kThreads>(stage + kChunk * (kK + kSlice), A_lo + int64_t(t0) * H * kK,
                                                    int64_t(H) * kK, valid);
    }
    tile::cp_async_commit();
  };
  auto load_gates = [&](int step, float& lo, float& hi) {
    const int t0 = chunk_at(step) * kChunk;
    gla::load_chunk_gates(g + int64_t(t0) * H, H, min(kChunk, p.time - t0), lo, hi);
  };
#pragma unroll
  for (int step = 0; step < Tr::kStages - 1; ++step) issue(step);
  float g_lo = 0, g_hi = 0;  // warp 0: the gates of the chunk folded in next
  if (warp == 0 && NC > 0) load_gates(0, g_lo, g_hi);

  for (int step = 0; step < NC; ++step) {
    // The state at this chunk boundary: S before the chunk, or dE after it.
    const int64_t at = int64_t(chunk_at(step)) * kK * V;
    store_state(states + at, states_lo ? states_lo + at : nullptr, s, m0, n0, V);
    tile::cp_async_wait<Tr::kStages - 2>();  // this thread's copies of the chunk have landed
    __syncthreads();  // everyone's have, and every warp is done with the previous chunk's stage and weights
    issue(step + Tr::kStages - 1);  // into the stage the previous chunk used
    if (warp == 0) {
      gla::chunk_cumsum_warp(g_lo, g_hi);
      const float G_last = __shfl_sync(0xffffffffu, g_hi, 31);
      if (job.reverse) {
        sW[lane] = p.scale * __expf(g_lo);
        sW[lane + 32] = p.scale * __expf(g_hi);
      } else {
        sW[lane] = __expf(G_last - g_lo);
        sW[lane + 32] = __expf(G_last - g_hi);
      }
      if (lane == 0) sDecay = __expf(G_last);
      if (step + 1 < NC) load_gates(step + 1, g_lo, g_hi);
    }
    __syncthreads();

    const bf16* sA = ring + (step % Tr::kStages) * Tr::kStageElems;
    const bf16* sB = sA + kChunk * kK;
    const bf16* sA_lo = sB + kChunk * kSlice;
    const float decay = sDecay;
#pragma unroll
    for (int j = 0; j < Tr::kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] *= decay;
        // s += Aᵀ diag(w) B over the chunk's rows: A is stored [row][k], i.e. transposed for this product; its fragment
        // holds rows (tokens) 2t, 2t + 1 in a0/a1 and 2t + 8, 2t + 9 in a2/a3 of the 16-row step.
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      // The row weights of this thread's fragment rows (tokens) r, r + 1 and r + 8, r + 9: in A's registers 0/1 and
      // 2/3, in a B pair's 0/2 and 1/3.
      const int r = kk * 16 + 2 * t;
      const float w0 = sW[r], w1 = sW[r + 1], w8 = sW[r + 8], w9 = sW[r + 9];
      uint32_t af[4], af_lo[4];
      tile::load_a_transposed<kK>(af, sA, m0, kk * 16, lane);
      if constexpr (kLo) {
        if (precise) tile::load_a_transposed<kK>(af_lo, sA_lo, m0, kk * 16, lane);
      } else {
        af[0] = gla::scale_pair(af[0], w0, w1);
        af[1] = gla::scale_pair(af[1], w0, w1);
        af[2] = gla::scale_pair(af[2], w8, w9);
        af[3] = gla::scale_pair(af[3], w8, w9);
      }
#pragma unroll
      for (int np = 0; np < Tr::kTiles / 2; ++np) {
        uint32_t bf[4];
        tile::load_b_pair_kn<kSlice>(bf, sB, n0 + np * 16, kk * 16, lane);
        if constexpr (kLo) {
          bf[0] = gla::scale_pair(bf[0], w0, w1);
          bf[2] = gla::scale_pair(bf[2], w0, w1);
          bf[1] = gla::scale_pair(bf[1], w8, w9);
          bf[3] = gla::scale_pair(bf[3], w8, w9);
        }
        tile::mma_bf16(s[2 * np], af, bf[0], bf[1]);
        tile::mma_bf16(s[2 * np + 1], af, bf[2], bf[3]);
        if (kLo && precise) {
          tile::mma_bf16(s[2 * np], af_lo, bf[0], bf[1]);
          tile::mma_bf16(s[2 * np + 1], af_lo, bf[2], bf[3]);
        }
      }
    }
  }
  tile::cp_async_wait<0>();  // only empty groups can remain; leave none in flight

  if (job.final_state) {
#pragma unroll
    for (int j = 0; j < Tr::kTiles; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = m0 + gla::frag_row(2 * r), col = n0 + gla::frag_col(j, 0);
        gla::store_pair(job.final_state + state_offset + int64_t(row) * V + col, s[j][2 * r], s[j][2 * r + 1]);
      }
  }
}

template <int kK, int kSlice, bool kLo> void launch_scan(const ScanLaunch& p, int count) {
  using Tr = ScanTraits<kK, kSlice, kLo>;
  constexpr auto kernel = gla_scan_kernel<kK, kSlice, kLo>;
  allow_dynamic_smem<kernel>(Tr::kSmemBytes);
  const dim3 grid(unsigned(p.value_dim / kSlice), unsigned(p.heads), unsigned(p.batch * count));
  cuda::launch_dependent(kernel, grid, kThreads, Tr::kSmemBytes, p);
}

}  // namespace

void gla_state_scans(const GlaDims& d, const float* g, float scale, const GlaScanJob* jobs, int count,
                     int value_slice) {
  if (d.batch == 0 || d.heads == 0) return;
  ScanLaunch p{};
  bool lo = false;
  for (int i = 0; i < count; ++i) {
    p.job[i] = jobs[i];
    lo = lo || jobs[i].a_lo != nullptr || jobs[i].states_lo != nullptr;
  }
  p.g = g;
  p.scale = scale;
  p.batch = int(d.batch);
  p.time = int(d.time);
  p.heads = int(d.heads);
  p.value_dim = int(d.value_dim);
  p.chunks = int(gla_chunks(d));
  PRIMER_CHECK(value_slice == 0 || value_slice == 32 || value_slice == 64,
               "gla_state_scans: value_slice {} is not 32, 64 or 0 (the default)", value_slice);
  if (value_slice == 0)
    value_slice = leaves_half_the_sms_idle(int64_t(count) * d.batch * d.heads * (d.value_dim / 64)) ? 32 : 64;
  auto launch = [&](auto slice) {
    constexpr int kSlice = decltype(slice)::value;
    if (d.key_dim == 64)
      lo ? launch_scan<64, kSlice, true>(p, count) : launch_scan<64, kSlice, false>(p, count);
    else
      lo ? launch_scan<128, kSlice, true>(p, count) : launch_scan<128, kSlice, false>(p, count);
  };
  if (value_slice == 32)
    launch(std::integral_constant<int, 32>{});
  else
    launch(std::integral_constant<int, 64>{});
}

}  // namespace primer::ops::cuda_ops
