// The Chebyshev iteration of one chunk: one CTA per (chunk, batch·head), 8 warps. Warp (wm, wn) owns rows
// 16·wm .. +16 of the chunk and the column half wn of the D columns, where it keeps the iterate X, the previous
// iterate and the right-hand side in fp32 registers for all r iterations. One matvec for all 64 rows is
//   H_c x_c = ζ_c (X H_0ᵀ)_c + (((X Kᵀ) ⊙ Mᵀ) K)_c,   Mᵀ[c][j] = e^{G_c−G_j} (j ≤ c)
// with H_0 as a hi + lo pair of bf16 (its rounding would otherwise cap the solve near 1e-2) and K
// exact in bf16 for bf16 inputs. The iterate X and the masked product P = (X Kᵀ) ⊙ Mᵀ are staged either as hi + lo
// pairs as well (precise_iterate: ~16-bit operands, five products per matvec instead of three) or as one bf16
// each, whose 2^-9 rounding the solve amplifies by up to κ = (1 + ridge)/ridge (the GKA digest's "iterate as
// operand" case: 2e-2 … 4e-2 residual at ridge 0.02). ‖H_c‖_F comes from Eq. (5) (see the CPU path).
// Where wgmma runs (sm_90a) launch_iterate hands the work to chebyshev_solve_iterate_wgmma.cu instead; this kernel
// serves other GPUs and PRIMER_NO_WGMMA=1.
#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/block_reduce.cuh"
#include "core/ops/cuda/chebyshev_solve_iterate.cuh"
#include "core/ops/cuda/chebyshev_solve_kernels.h"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/wgmma_available.h"

namespace primer::ops::cuda_ops::cheb {
namespace {

constexpr int kThreads = 256;

// Shared memory: H_0 hi + lo, K, X and P (and, when split, X's and P's lo tiles), then the per-row scalars.
template <int D, bool kSplit> struct IterateSmem {
  static constexpr int kTileElems = 2 * D * D + (kSplit ? 3 : 2) * kC * D + (kSplit ? 2 : 1) * kC * kC;
  static constexpr int kBytes = kTileElems * int(sizeof(bf16)) + RowScalars::kFloats * int(sizeof(float));
};

// The CTA's shared tiles and this thread's place in the warp tiling (x_lo, p_lo: null unless split).
template <int D> struct Tiles : WarpTile<D> { bf16 *h_hi, *h_lo, *k, *x, *p, *x_lo, *p_lo; };

// P = A Kᵀ (this warp's 16 x 32 part) and Y = A H_0ᵀ (its 16 x D/2 part, H_0 as hi + lo) for a [64][D] tile A,
// with A as hi + lo when kLo (the lo x H_0-lo product, 2^-18 of the result, left out): each fragment of A is loaded
// once for both products.
template <int D, bool kLo> __device__ __forceinline__ void products_with_k_and_h0(float (&p)[4][4],
                                                                                  float (&Y)[D / 16][4], const bf16* A,
                                                                                  const bf16* A_lo, const Tiles<D>& s) {
  constexpr int kNT = D / 16;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) p[nt][e] = 0.f;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) Y[nt][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4], a_lo[4];
    tile::load_a<D>(a, A, s.m0, 16 * kk, s.lane);
    if constexpr (kLo) tile::load_a<D>(a_lo, A_lo, s.m0, 16 * kk, s.lane);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      uint32_t b[4];
      tile::load_b_pair_nk<D>(b, s.k, s.pcol0 + 16 * q, 16 * kk, s.lane);
      tile::mma_bf16(p[2 * q], a, b[0], b[1]);
      tile::mma_bf16(p[2 * q + 1], a, b[2], b[3]);
      if constexpr (kLo) {
        tile::mma_bf16(p[2 * q], a_lo, b[0], b[1]);
        tile::mma_bf16(p[2 * q + 1], a_lo, b[2], b[3]);
      }
    }
#pragma unroll
    for (int q = 0; q < kNT / 2; ++q) {
      uint32_t hi[4], lo[4];
      tile::load_b_pair_nk<D>(hi, s.h_hi, s.ncol0 + 16 * q, 16 * kk, s.lane);
      tile::load_b_pair_nk<D>(lo, s.h_lo, s.ncol0 + 16 * q, 16 * kk, s.lane);
      tile::mma_bf16(Y[2 * q], a, hi[0], hi[1]);
      tile::mma_bf16(Y[2 * q + 1], a, hi[2], hi[3]);
      tile::mma_bf16(Y[2 * q], a, lo[0], lo[1]);
      tile::mma_bf16(Y[2 * q + 1], a, lo[2], lo[3]);
      if constexpr (kLo) {
        tile::mma_bf16(Y[2 * q], a_lo, hi[0], hi[1]);
        tile::mma_bf16(Y[2 * q + 1], a_lo, hi[2], hi[3]);
      }
    }
  }
}

// Y = H_c X_c for the CTA's 64 rows; X in this thread's registers, staged (with P) as hi + lo when kSplit. Two
// barriers; every thread must call it.
template <int D, bool kSplit>
__device__ __forceinline__ void chunk_matvec(float (&Y)[D / 16][4], const float (&X)[D / 16][4],
                                             const float (&mask)[4][4], const float (&zeta)[2], const Tiles<D>& s) {
  constexpr int kNT = D / 16;
  if constexpr (kSplit)
    tile::store_tile_split<D, kNT>(s.x, s.x_lo, X, s.m0, s.ncol0, s.lane);
  else
    tile::store_tile<D, kNT>(s.x, X, s.m0, s.ncol0, s.lane);
  __syncthreads();
  float p[4][4];
  products_with_k_and_h0<D, kSplit>(p, Y, s.x, s.x_lo, s);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) p[nt][e] *= mask[nt][e];
  if constexpr (kSplit)
    tile::store_tile_split<kC, 4>(s.p, s.p_lo, p, s.m0, s.pcol0, s.lane);
  else
    tile::store_tile<kC, 4>(s.p, p, s.m0, s.pcol0, s.lane);
  __syncthreads();
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) Y[nt][e] *= zeta[e >> 1];
  tile::mma_AB<kC, kC, D>(Y, s.p, s.k, s.m0, s.ncol0, s.lane);  // + ((X Kᵀ) ⊙ Mᵀ) K
  if constexpr (kSplit) tile::mma_AB<kC, kC, D>(Y, s.p_lo, s.k, s.m0, s.ncol0, s.lane);
}

template <int D, class T, bool kBackward, bool kSplit> __global__ void __launch_bounds__(kThreads, 1)
    iterate_kernel(IterateArgs a) {
  cuda::await_prior_grid();
  constexpr int kNT = D / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  Tiles<D> s;
  static_cast<WarpTile<D>&>(s) = WarpTile<D>::of_thread();
  s.h_hi = reinterpret_cast<bf16*>(smem);
  s.h_lo = s.h_hi + D * D;
  s.k = s.h_lo + D * D;
  s.x = s.k + kC * D;
  s.p = s.x + kC * D;
  s.x_lo = kSplit ? s.p + kC * kC : nullptr;
  s.p_lo = kSplit ? s.x_lo + kC * D : nullptr;
  const RowScalars sc(reinterpret_cast<float*>(smem + (IterateSmem<D, kSplit>::kTileElems) * sizeof(bf16)));

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
  const int64_t bh = blockIdx.y;
  const ChunkRef c = a.geo.chunk(bh, blockIdx.x, D);
  const T* k = static_cast<const T*>(a.k);

  // Stage K and H_0; ‖H_0‖² and the chunk's log-decays on the way.
  stage_rows<T, D, kThreads>(s.k, nullptr, k + c.row0, c.row_stride, 0, c.len, nullptr);
  const float h0_sq = warp_sum(stage_matrix<D, kThreads>(s.h_hi, s.h_lo, a.states + a.geo.state(bh, blockIdx.x, D)));
  if (lane == 0) sc.warp[warp] = h0_sq;
  chunk_log_decays(sc.g, a.gk, c);
  if (threadIdx.x < kC)
    sc.quad[threadIdx.x] = sc.fresh[threadIdx.x] = sc.dot1[threadIdx.x] = sc.dot2[threadIdx.x] = 0.f;
  __syncthreads();

  // The decays of this thread's elements of a 64 x 64 product (rows s.row(e >> 1), columns pcol0 + 8nt + 2t + e%2).
  float mask[4][4];
  chunk_mask(mask, sc.g, c.len, s.pcol0, s);

  // Eq. (5)'s per-row ingredients: k_jᵀH_0k_j from K H_0ᵀ, and the Gram terms of the in-chunk part.
  {
    float z[kNT][4], p[4][4];
    products_with_k_and_h0<D, false>(p, z, s.k, nullptr, s);  // the Gram matrix K Kᵀ and K H_0ᵀ
    float kk[kNT][4];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const __nv_bfloat162 pair =
            *reinterpret_cast<const __nv_bfloat162*>(s.k + tile::swizzle<D>(s.row(half), s.ncol0 + 8 * nt + 2 * t));
        kk[nt][2 * half] = __low2float(pair);
        kk[nt][2 * half + 1] = __high2float(pair);
      }
    add_row_dots(sc.quad, z, kk, s);
    add_fresh_terms(sc.fresh, mask, p, s.pcol0, s);
  }
  __syncthreads();
  if (warp == 0) {
    float h0 = 0.f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) h0 += sc.warp[w];
    chunk_row_norms(sc.norm, sc.g, sc.quad, sc.fresh, h0, c.len);
  }
  __syncthreads();

  const RowConstants rc(sc.g, sc.norm, a.ridge, s);
  float R[kNT][4], X[kNT][4], Xp[kNT][4];
  load_rows<T>(R, static_cast<const T*>(a.rhs), c, s);
  chebyshev_start(X, Xp, R, rc);
  chebyshev_iterate<false>(
      X, Xp, a.num_iter, a.ridge, rc,
      [&](float(&Y)[kNT][4], const float(&x)[kNT][4]) { chunk_matvec<D, kSplit>(Y, x, mask, rc.zeta, s); },
      [&](float(&r)[kNT][4]) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) r[nt][e] = R[nt][e];
      });
  store_rows<T>(static_cast<T*>(a.out), X, c, s);

  if constexpr (kBackward) {
    // X is the adjoint s: the per-row weights of the gate gradient need x·s and s·(H x).
    float xf[kNT][4];
    load_rows<T>(xf, static_cast<const T*>(a.x), c, s);
    add_row_dots(sc.dot1, xf, X, s);
    float Y[kNT][4];
    chunk_matvec<D, kSplit>(Y, xf, mask, rc.zeta, s);  // its barriers also publish sc.dot1
    add_row_dots(sc.dot2, X, Y, s);
    __syncthreads();
    if (warp == 0) adjoint_row_weights(a, bh, blockIdx.x, sc.g, sc.norm, sc.dot1, sc.dot2, c.len);
  }
}

template <int D, class T, bool kBackward, bool kSplit> void launch(const IterateArgs& a, const ChebyshevDims& d) {
  constexpr auto kernel = iterate_kernel<D, T, kBackward, kSplit>;
  constexpr int kBytes = IterateSmem<D, kSplit>::kBytes;
  allow_dynamic_smem<kernel>(kBytes);
  const dim3 grid(unsigned(d.chunks()), unsigned(d.heads_total()));
  cuda::launch_dependent(kernel, grid, kThreads, kBytes, a);
}

}  // namespace

void launch_iterate(const ChebyshevDims& d, DType dtype, const void* rhs, const void* k, const float* gk,
                    const float* states, void* out, const void* x, float* W, float* u) {
  const IterateArgs a{rhs, k, gk, states, out, x, W, u, geom_of(d), float(d.ridge), int(d.num_iter), d.bp_lambda};
  if (wgmma_available()) return launch_iterate_wgmma(a, d, dtype);
  with_iterate_variant(d, dtype, x != nullptr, [&](auto dim, auto tag, auto backward, auto split) {
    launch<decltype(dim)::value, decltype(tag), decltype(backward)::value, decltype(split)::value>(a, d);
  });
}

}  // namespace primer::ops::cuda_ops::cheb
