// dk and dgk of the chunked Chebyshev solve, one CTA per (chunk, batch·head), 8 warps in the tiling of the
// iteration kernel. With s = dq (the adjoint), x, the chunk-start state H_0, the gradient Ĥ wrt the chunk's last
// state (from the reverse scan) and the per-row W and u from the adjoint solve (core/ops/cpu/chebyshev_solve.cpp
// derives every term):
//   dk = −[((K Xᵀ)⊙M) S + ((K Sᵀ)⊙M) X + ((K Kᵀ)⊙M_w) K] − ζ∘W ∘ K·½(H_0 + H_0ᵀ) + e^{G_L−G} ∘ K·(Ĥ + Ĥᵀ)
// with M[t][t'] = e^{G_t'−G_t} (t' ≥ t) and the full mask M_w[t][j] = e^{2G_m−G_t−G_j} W_m, m = max(t, j); then
// dG_t = u_t − ½ k_t·dk_t + [t = L]⟨Ĥ, H_L⟩ and dgk_t = Σ_{i≥t} dG_i. Products with a matrix's transpose read the
// same shared tile the other way round, so nothing is symmetrised in memory. In f32 (precise, chebyshev_solve.h) X,
// S and Ĥ are staged as hi + lo and each product with one of them runs once with each half. The products run through
// tile/tile_products.cuh: on Hopper by warpgroup MMA, each phase's products issued together (H200, B 4, T 4096, H 16,
// D 128, precise: 0.667 -> 0.562 ms; the mma.sync path, the same body, unchanged at 0.66).
#include "core/cuda_runtime.h"
#include "core/ops/cuda/chebyshev_solve_common.cuh"
#include "core/ops/cuda/chebyshev_solve_kernels.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/tile/tile_products.cuh"
#include "core/ops/cuda/wgmma_available.h"

namespace primer::ops::cuda_ops::cheb {
namespace {

constexpr int kThreads = 256;

struct KeyGradArgs {
  const void *s, *x, *k;  // s may be null (num_iter = 0)
  const float* gk;        // may be null: no dgk
  const float *states, *dstates, *W, *u, *hdot;
  void* dk;
  float* dgk;
  Geom geo;
  int hdot_tiles;
};

template <int D, bool kPrecise> struct KeyGradSmem {
  static constexpr int kTileElems = 3 * kC * D + 2 * D * D + 3 * kC * kC + (kPrecise ? 2 * kC * D + D * D : 0);
  static constexpr int kBytes = kTileElems * int(sizeof(bf16)) + 4 * kC * int(sizeof(float));
};

template <int D, class T, class Products> __global__ void __launch_bounds__(kThreads, 1)
    key_gradients_kernel(KeyGradArgs a) {
  cuda::await_prior_grid();
  using P = Products;
  constexpr bool kPrecise = std::is_same_v<T, float>;
  constexpr int kNT = D / 16;
  using Rows = typename P::template Layout<kC, D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* s_k = P::tiles(smem);
  bf16* s_x = s_k + kC * D;
  bf16* s_s = s_x + kC * D;
  bf16* s_h0 = s_s + kC * D;
  bf16* s_adj = s_h0 + D * D;
  bf16* s_pa = s_adj + D * D;
  bf16* s_pb = s_pa + kC * kC;
  bf16* s_pc = s_pb + kC * kC;
  bf16* s_x_lo = s_pc + kC * kC;  // the residuals, when kPrecise
  bf16* s_s_lo = s_x_lo + kC * D;
  bf16* s_adj_lo = s_s_lo + kC * D;
  float* s_g = reinterpret_cast<float*>(s_pc + kC * kC + (kPrecise ? 2 * kC * D + D * D : 0));
  float* s_w = s_g + kC;
  float* s_u = s_w + kC;
  float* s_kdk = s_u + kC;

  const WarpTile<D> wt = WarpTile<D>::of_thread();
  const int warp = threadIdx.x >> 5, lane = wt.lane, t = lane & 3;
  const int64_t bh = blockIdx.y, n = blockIdx.x;
  const ChunkRef c = a.geo.chunk(bh, n, D);
  const T *k = static_cast<const T*>(a.k), *x = static_cast<const T*>(a.x), *s = static_cast<const T*>(a.s);

  {
    RowPieces<T, D, kThreads> k_rows, x_rows, s_rows;  // all loads in flight together
    k_rows.load(k + c.row0, c.row_stride, 0, c.len);
    x_rows.load(x + c.row0, c.row_stride, 0, c.len);
    s_rows.load(s ? s + c.row0 : nullptr, c.row_stride, 0, c.len);
    k_rows.template store<Rows>(s_k, nullptr, nullptr);
    x_rows.template store<Rows>(s_x, kPrecise ? s_x_lo : nullptr, nullptr);
    s_rows.template store<Rows>(s_s, kPrecise ? s_s_lo : nullptr, nullptr);
  }
  using Square = typename P::template Layout<D, D>;
  stage_matrix<D, kThreads, Square>(s_h0, nullptr, a.states + a.geo.state(bh, n, D));
  stage_matrix<D, kThreads, Square>(s_adj, kPrecise ? s_adj_lo : nullptr, a.dstates + (bh * a.geo.N + n) * D * D);
  chunk_log_decays(s_g, a.gk, c);
  if (threadIdx.x < kC) {
    const int i = threadIdx.x;
    s_w[i] = a.W[a.geo.rows(bh, n) + i];
    s_u[i] = a.u[a.geo.rows(bh, n) + i];
    s_kdk[i] = 0.f;
  }
  P::sync();

  // The three 64 x 64 masked products, this warp's 16 x 32 part of each (on wgmma all issued before the first wait).
  {
    float pa[4][4] = {}, pb[4][4] = {}, pc[4][4] = {};
    auto k_times_transposed = [&](float(&acc)[4][4], const bf16* rows) {
      P::template abt_async<D, kC, D, kC, D>(acc, s_k, rows, wt.m0, wt.pcol0, lane);
    };
    k_times_transposed(pa, s_x);  // K Xᵀ
    k_times_transposed(pb, s_s);  // K Sᵀ
    if constexpr (kPrecise) {
      k_times_transposed(pa, s_x_lo);
      k_times_transposed(pb, s_s_lo);
    }
    k_times_transposed(pc, s_k);  // K Kᵀ
    P::template wait<0>(pa, pb, pc);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = wt.row(e >> 1), j = wt.pcol0 + 8 * nt + 2 * t + (e & 1);
        const bool valid = row < c.len && j < c.len;
        const int m = max(row, j);
        const float causal = valid && j >= row ? __expf(s_g[j] - s_g[row]) : 0.f;
        const float full = valid ? __expf(2.f * s_g[m] - s_g[row] - s_g[j]) * s_w[m] : 0.f;
        pa[nt][e] *= causal;
        pb[nt][e] *= causal;
        pc[nt][e] *= full;
      }
    P::template store<kC, kC>(s_pa, pa, wt.m0, wt.pcol0, lane);
    P::template store<kC, kC>(s_pb, pb, wt.m0, wt.pcol0, lane);
    P::template store<kC, kC>(s_pc, pc, wt.m0, wt.pcol0, lane);
  }
  P::sync();

  // The masked products' part of dk, K (H_0 + H_0ᵀ) and K (Ĥ + Ĥᵀ), all issued, then combined as they complete.
  float dk[kNT][4] = {}, y_h0[kNT][4] = {}, y_adj[kNT][4] = {};
  auto times_rows = [&](float(&acc)[kNT][4], const bf16* masked, const bf16* rows) {
    P::template ab_async<kC, kC, kC, kC, D>(acc, masked, rows, wt.m0, wt.ncol0, lane);
  };
  times_rows(dk, s_pa, s_s);
  times_rows(dk, s_pb, s_x);
  if constexpr (kPrecise) {
    times_rows(dk, s_pa, s_s_lo);
    times_rows(dk, s_pb, s_x_lo);
  }
  times_rows(dk, s_pc, s_k);
  auto k_times_symmetric = [&](float(&acc)[kNT][4], const bf16* m) {  // K M + K Mᵀ
    P::template ab_async<D, kC, D, D, D>(acc, s_k, m, wt.m0, wt.ncol0, lane);
    P::template abt_async<D, kC, D, D, D>(acc, s_k, m, wt.m0, wt.ncol0, lane);
  };
  k_times_symmetric(y_h0, s_h0);
  k_times_symmetric(y_adj, s_adj);
  if constexpr (kPrecise) k_times_symmetric(y_adj, s_adj_lo);
  constexpr int kAdjointGroups = kPrecise ? 4 : 2;  // issued after y_h0's
  float coef_h0[2], coef_adj[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = wt.row(half);
    coef_h0[half] = 0.5f * __expf(s_g[row]) * s_w[row];
    coef_adj[half] = __expf(s_g[c.len - 1] - s_g[row]);
  }
  P::template wait<kAdjointGroups>(dk, y_h0);
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[nt][e] = -dk[nt][e] - coef_h0[e >> 1] * y_h0[nt][e];
  P::template wait<0>(y_adj);
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[nt][e] += coef_adj[e >> 1] * y_adj[nt][e];
  store_rows<T>(static_cast<T*>(a.dk), dk, c, wt);
  if (!a.dgk) return;

  float kk[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const __nv_bfloat162 pair =
          *reinterpret_cast<const __nv_bfloat162*>(s_k + Rows::offset(wt.row(half), wt.ncol0 + 8 * nt + 2 * t));
      kk[nt][2 * half] = __low2float(pair);
      kk[nt][2 * half + 1] = __high2float(pair);
    }
  add_row_dots(s_kdk, kk, dk, wt);
  __syncthreads();
  if (warp == 0) {
    float hdot = 0.f;
    for (int i = 0; i < a.hdot_tiles; ++i) hdot += a.hdot[(bh * a.geo.N + n) * a.hdot_tiles + i];
    // Reversed order (scan index 2·lane + i is row 63 − 2·lane − i): dgk_t = Σ_{i≥t} dG_i as a scan with a = 1.
    float dG[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = kC - 1 - (2 * lane + i);
      dG[i] = row < c.len ? s_u[row] - 0.5f * s_kdk[row] + (row == c.len - 1 ? hdot : 0.f) : 0.f;
    }
    float y0, y1;
    warp_affine_scan(1.f, dG[0], 1.f, dG[1], y0, y1);
    const int row0 = kC - 1 - 2 * lane, row1 = row0 - 1;
    if (row0 < c.len) a.dgk[c.gate0 + row0 * c.gate_stride] = y0;
    if (row1 < c.len) a.dgk[c.gate0 + row1 * c.gate_stride] = y1;
  }
}

}  // namespace

void launch_key_gradients(const ChebyshevDims& d, DType dtype, const void* s, const void* x, const void* k,
                          const float* gk, const float* states, const float* dstates, const float* W, const float* u,
                          const float* hdot, void* dk, float* dgk) {
  const KeyGradArgs a{s, x, k, gk, states, dstates, W, u, hdot, dk, gk ? dgk : nullptr, geom_of(d), state_tiles(d)};
  with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_dim(d.dim, [&](auto dim) {
      constexpr int D = decltype(dim)::value;
      auto launch = [&](auto products) {
        using Products = decltype(products);
        constexpr auto kernel = key_gradients_kernel<D, T, Products>;
        constexpr int kBytes = KeyGradSmem<D, std::is_same_v<T, float>>::kBytes + Products::kAlignmentSlack;
        allow_dynamic_smem<kernel>(kBytes);
        cuda::launch_dependent(kernel, dim3(unsigned(d.chunks()), unsigned(d.heads_total())), kThreads, kBytes, a);
      };
      if (wgmma_available())
        launch(tile::GroupProducts{});
      else
        launch(tile::WarpProducts{});
    });
  });
}

}  // namespace primer::ops::cuda_ops::cheb
