// The sequential chunk-state pass of chunked GLA (see gla_scan.h). One block of 8 warps per (64- or 32-column slice
// of V, head, batch × job): warps tile the K × slice state as kWarpsM row strips of 16 × kWarpsN column groups and
// keep it in fp32 mma accumulators. Chunks stream through a ring of kStages shared-memory stages by cp.async,
// kStages − 1 chunks ahead of the one being folded in, so the chain of per-chunk updates never waits on global
// memory. The update is one tensor-core product Aᵀ diag(w) B per chunk; the row weights w are applied to the A
// fragments after ldmatrix, so the tiles land in shared memory untouched.
#include <type_traits>

#include "core/check.h"
#include "core/cuda_runtime.h"
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

template <int kK, int kSlice> struct ScanTraits {
  static constexpr int kWarpsM = kK / 16, kWarpsN = 8 / kWarpsM;
  static constexpr int kWarpCols = kSlice / kWarpsN, kTiles = kWarpCols / 8;
  static constexpr int kStages = 4;
  static constexpr int kStageElems = kChunk * (kK + kSlice);  // A tile [kChunk][kK], then B tile [kChunk][kSlice]
  static constexpr int kSmemBytes = kStages * kStageElems * int(sizeof(bf16));
};

template <int kK, int kSlice> __global__ void __launch_bounds__(kThreads, 2) gla_scan_kernel(ScanLaunch p) {
  using Tr = ScanTraits<kK, kSlice>;
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
  bf16* states = static_cast<bf16*>(job.states) + (int64_t(b) * H + h) * NC * kK * V + v0;
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
    bf16* out = states + int64_t(chunk_at(step)) * kK * V;
#pragma unroll
    for (int j = 0; j < Tr::kTiles; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = m0 + gla::frag_row(2 * r), col = n0 + gla::frag_col(j, 0);
        gla::store_pair(out + int64_t(row) * V + col, s[j][2 * r], s[j][2 * r + 1]);
      }
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
    const float decay = sDecay;
#pragma unroll
    for (int j = 0; j < Tr::kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] *= decay;
        // s += Aᵀ diag(w) B over the chunk's rows: A is stored [row][k], i.e. transposed for this product; its fragment
        // holds rows (tokens) 2t, 2t + 1 in a0/a1 and 2t + 8, 2t + 9 in a2/a3 of the 16-row step.
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      uint32_t af[4];
      tile::load_a_transposed<kK>(af, sA, m0, kk * 16, lane);
      const int r = kk * 16 + 2 * t;
      af[0] = gla::scale_pair(af[0], sW[r], sW[r + 1]);
      af[1] = gla::scale_pair(af[1], sW[r], sW[r + 1]);
      af[2] = gla::scale_pair(af[2], sW[r + 8], sW[r + 9]);
      af[3] = gla::scale_pair(af[3], sW[r + 8], sW[r + 9]);
#pragma unroll
      for (int np = 0; np < Tr::kTiles / 2; ++np) {
        uint32_t bf[4];
        tile::load_b_pair_kn<kSlice>(bf, sB, n0 + np * 16, kk * 16, lane);
        tile::mma_bf16(s[2 * np], af, bf[0], bf[1]);
        tile::mma_bf16(s[2 * np + 1], af, bf[2], bf[3]);
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

template <int kK, int kSlice> void launch_scan(const ScanLaunch& p, int count) {
  using Tr = ScanTraits<kK, kSlice>;
  constexpr auto kernel = gla_scan_kernel<kK, kSlice>;
  allow_dynamic_smem<kernel>(Tr::kSmemBytes);
  const dim3 grid(unsigned(p.value_dim / kSlice), unsigned(p.heads), unsigned(p.batch * count));
  kernel<<<grid, kThreads, Tr::kSmemBytes, cuda::stream()>>>(p);
  PRIMER_CUDA_CHECK_LAUNCH();
}

}  // namespace

void gla_state_scans(const GlaDims& d, const float* g, float scale, const GlaScanJob* jobs, int count,
                     int value_slice) {
  if (d.batch == 0 || d.heads == 0) return;
  ScanLaunch p{};
  for (int i = 0; i < count; ++i) p.job[i] = jobs[i];
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
    if (d.key_dim == 64)
      launch_scan<64, decltype(slice)::value>(p, count);
    else
      launch_scan<128, decltype(slice)::value>(p, count);
  };
  if (value_slice == 32)
    launch(std::integral_constant<int, 32>{});
  else
    launch(std::integral_constant<int, 64>{});
}

}  // namespace primer::ops::cuda_ops
