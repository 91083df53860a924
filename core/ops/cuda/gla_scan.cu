// The sequential chunk-state pass of chunked GLA (see gla_scan.h). One block of 8 warps per (64-column slice of V,
// head, batch × job): warps tile the K × 64 state slice as kWarpsM row strips of 16 × kWarpsN column groups and
// keep it in fp32 mma accumulators. Each chunk's operands are fetched into registers one chunk ahead, so global
// latency overlaps the previous chunk's products; the update is one tensor-core product Aᵀ (w ⊙ B) per chunk.
#include "core/cuda_runtime.h"
#include "core/ops/cuda/gla_scan.h"
#include "core/ops/cuda/gla_tiles.cuh"

namespace primer::ops::cuda_ops {
namespace {

using gla::bf16;
using gla::kChunk;
using gla::kThreads;
constexpr int kSlice = 64;  // columns of V per block

struct ScanLaunch {
  GlaScanJob job[2];
  const float* g;
  float scale;
  int batch, time, heads, value_dim, chunks;
};

template <int kK>
struct ScanTraits {
  static constexpr int kWarpsM = kK / 16, kWarpsN = 8 / kWarpsM;
  static constexpr int kWarpCols = kSlice / kWarpsN, kTiles = kWarpCols / 8;
  static constexpr int kSmemBytes = kChunk * (kK + kSlice) * int(sizeof(bf16));
};

template <class T, int kK>
__global__ void __launch_bounds__(kThreads) gla_scan_kernel(ScanLaunch p) {
  using Tr = ScanTraits<kK>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sA = reinterpret_cast<bf16*>(smem);  // [kChunk][kK]
  bf16* sB = sA + kChunk * kK;               // [kChunk][kSlice]
  __shared__ float sG[kChunk];

  const int v0 = blockIdx.x * kSlice, h = blockIdx.y;
  const int b = blockIdx.z % p.batch;
  const GlaScanJob job = blockIdx.z < p.batch ? p.job[0] : p.job[1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = (warp % Tr::kWarpsM) * 16, n0 = (warp / Tr::kWarpsM) * Tr::kWarpCols;
  const int H = p.heads, V = p.value_dim, NC = p.chunks;
  const T* A = static_cast<const T*>(job.a) + (int64_t(b) * p.time * H + h) * kK;
  const T* Bm = static_cast<const T*>(job.b) + (int64_t(b) * p.time * H + h) * V + v0;
  const float* g = p.g + int64_t(b) * p.time * H + h;
  const int64_t state_offset = (int64_t(b) * H + h) * kK * V + v0;  // of [B, H, K, V] at column v0
  bf16* states = static_cast<bf16*>(job.states) + (int64_t(b) * H + h) * NC * kK * V + v0;

  float s[Tr::kTiles][4];
#pragma unroll
  for (int j = 0; j < Tr::kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = m0 + gla::frag_row(e), col = n0 + gla::frag_col(j, e);
      s[j][e] = job.init ? job.init[state_offset + int64_t(row) * V + col] : 0.f;
    }

  gla::TileRegs<T, kChunk, kK> ra;
  gla::TileRegs<T, kChunk, kSlice> rb;
  float g_lo = 0, g_hi = 0;
  auto fetch = [&](int c) {
    const int t0 = c * kChunk, valid = min(kChunk, p.time - t0);
    ra.fetch(A + int64_t(t0) * H * kK, int64_t(H) * kK, valid);
    rb.fetch(Bm + int64_t(t0) * H * V, int64_t(H) * V, valid);
    if (warp == 0) gla::load_chunk_gates(g + int64_t(t0) * H, H, valid, g_lo, g_hi);
  };
  if (NC > 0) fetch(job.reverse ? NC - 1 : 0);

  for (int step = 0; step < NC; ++step) {
    const int c = job.reverse ? NC - 1 - step : step;
    // The state at this chunk boundary: S before chunk c, or dE after it.
    bf16* out = states + int64_t(c) * kK * V;
#pragma unroll
    for (int j = 0; j < Tr::kTiles; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = m0 + gla::frag_row(2 * r), col = n0 + gla::frag_col(j, 0);
        gla::store_pair(out + int64_t(row) * V + col, s[j][2 * r], s[j][2 * r + 1]);
      }
    __syncthreads();  // the previous chunk's products are done with sA, sB and sG
    if (warp == 0) gla::chunk_cumsum_warp(g_lo, g_hi, sG);
    ra.store(sA);
    __syncthreads();
    const float G_last = sG[kChunk - 1];
    if (job.reverse) {
      const float scale = p.scale;
      rb.store(sB, [&](int row) { return scale * __expf(sG[row]); });
    } else {
      rb.store(sB, [&](int row) { return __expf(G_last - sG[row]); });
    }
    if (step + 1 < NC) fetch(job.reverse ? c - 1 : c + 1);
    __syncthreads();

    const float decay = __expf(G_last);
#pragma unroll
    for (int j = 0; j < Tr::kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] *= decay;
    // s += Aᵀ B over the chunk's rows: A is stored [row][k], i.e. transposed for this product.
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      uint32_t af[4];
      attn::load_a_transposed<kK>(af, sA, m0, kk * 16, lane);
#pragma unroll
      for (int np = 0; np < Tr::kTiles / 2; ++np) {
        uint32_t bf[4];
        attn::load_b_pair_kn<kSlice>(bf, sB, n0 + np * 16, kk * 16, lane);
        attn::mma_bf16(s[2 * np], af, bf[0], bf[1]);
        attn::mma_bf16(s[2 * np + 1], af, bf[2], bf[3]);
      }
    }
  }

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

template <class T, int kK>
void launch_scan(const ScanLaunch& p, int count) {
  using Tr = ScanTraits<kK>;
  const dim3 grid(unsigned(p.value_dim / kSlice), unsigned(p.heads), unsigned(p.batch * count));
  gla_scan_kernel<T, kK><<<grid, kThreads, Tr::kSmemBytes, cuda::stream()>>>(p);
  PRIMER_CUDA_CHECK_LAUNCH();
}

}  // namespace

void gla_state_scans(const GlaDims& d, DType dtype, const float* g, float scale, const GlaScanJob* jobs, int count) {
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
  const bool f32 = dtype == DType::F32;
  if (d.key_dim == 64) f32 ? launch_scan<float, 64>(p, count) : launch_scan<bf16, 64>(p, count);
  else f32 ? launch_scan<float, 128>(p, count) : launch_scan<bf16, 128>(p, count);
}

}  // namespace primer::ops::cuda_ops
