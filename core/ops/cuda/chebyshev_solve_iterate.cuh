// The per-row steps of the Chebyshev iteration that its two kernels share (chebyshev_solve_iterate.cu on mma.sync,
// chebyshev_solve_iterate_wgmma.cu on Hopper's warpgroup MMA): the rows' ‖H_c‖_F from Eq. (5), the iteration's
// scalars, one three-term update, and the backward's per-row weights. The kernels differ only in how a chunk's
// matvec H_c x_c reaches the tensor cores; a thread holds its rows' elements in the accumulator layout of
// tile/mma.cuh in both.
#pragma once
#include "core/ops/cuda/chebyshev_solve_common.cuh"

namespace primer::ops::cuda_ops::cheb {

struct IterateArgs {
  const void *rhs, *k;
  const float* gk;  // may be null
  const float* states;
  void* out;
  const void* x;  // backward only: the forward's output
  float *W, *u;   // backward only
  Geom geo;
  float ridge;
  int num_iter;
  bool bp_lambda;
};

// A chunk's per-row scalars in shared memory (kFloats from `at`).
struct RowScalars {
  static constexpr int kFloats = 10 * kC + 16;
  float* g;       // the log-decays G_c
  float* norm;    // ‖H_c‖_F
  float* quad;    // k_jᵀ H_0 k_j
  float* fresh;   // (k_c·k_c)² + 2 Σ_{j<c} e^{G_c−G_j} (k_c·k_j)²
  float* dot1;    // backward: x·s, then
  float* dot2;    //           s·(H x)
  float* warp;    // one float per warp (‖H_0‖² partial sums)
  float* range;   // one float per warp (fp16 operands: partial maxima of |H_0|)
  float* rhs_sq;  // fp16 operands: ‖R_c‖², then (backward) ‖x_c‖², the rows' scales
  float* x_sq;
  float* key_unscale;  // fp16 operands: the inverse of the power of two each staged key row was scaled by
  float* p_max;        // fp16 operands: the largest entry of each row of the scaled mask (zeroed; an atomic maximum)
  __device__ __forceinline__ explicit RowScalars(float* at)
      : g(at),
        norm(at + kC),
        quad(at + 2 * kC),
        fresh(at + 3 * kC),
        dot1(at + 4 * kC),
        dot2(at + 5 * kC),
        warp(at + 6 * kC),
        range(at + 6 * kC + 8),
        rhs_sq(at + 6 * kC + 16),
        x_sq(at + 7 * kC + 16),
        key_unscale(at + 8 * kC + 16),
        p_max(at + 9 * kC + 16) {}
};

// The iteration on warpgroup MMA (chebyshev_solve_iterate_wgmma.cu); call only where wgmma_available().
void launch_iterate_wgmma(const IterateArgs& a, const ChebyshevDims& d, DType dtype);

// Warp 0, rows 2·lane and 2·lane + 1: Σ_{j≤c} e^{G_c−G_j} k_jᵀH_0k_j (from quad[j] = k_jᵀH_0k_j) and ‖S_c‖² (from
// fresh[c] = (k_c·k_c)² + 2 Σ_{j<c} e^{G_c−G_j} (k_c·k_j)²) by their recursions as scans, then Eq. (5):
// norm[c] = ‖ζ_c² H_0 + S_c‖_F with ζ_c = e^{G_c} and h0_sq = ‖H_0‖²; 0 past the chunk.
__device__ __forceinline__ void chunk_row_norms(float* norm, const float* G, const float* quad, const float* fresh,
                                                float h0_sq, int len) {
  const int lane = threadIdx.x & 31, c0 = 2 * lane, c1 = c0 + 1;
  const float g0 = c0 > 0 ? __expf(G[c0] - G[c0 - 1]) : 0.f, g1 = __expf(G[c1] - G[c0]);
  float cross0, cross1, intra0, intra1;
  warp_affine_scan(g0, quad[c0], g1, quad[c1], cross0, cross1);
  warp_affine_scan(g0 * g0, fresh[c0], g1 * g1, fresh[c1], intra0, intra1);
  const float z0 = __expf(G[c0]), z1 = __expf(G[c1]);
  norm[c0] = c0 < len ? sqrtf(fmaxf(0.f, z0 * z0 * h0_sq + 2.f * z0 * cross0 + intra0)) : 0.f;
  norm[c1] = c1 < len ? sqrtf(fmaxf(0.f, z1 * z1 * h0_sq + 2.f * z1 * cross1 + intra1)) : 0.f;
}

// A thread's two rows' constants: ζ = e^{G_c}, the ridge λ_c = ridge·‖H_c‖_F and the Chebyshev step
// 2 / ((1 + 2·ridge)·‖H_c‖_F) (0 where ‖H_c‖_F = 0: no key yet, x = 0).
struct RowConstants {
  float zeta[2], lambda[2], step[2];
  template <class Tile>
  __device__ __forceinline__ RowConstants(const float* G, const float* norm, float ridge, const Tile& s) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float F = norm[s.row(half)];
      zeta[half] = __expf(G[s.row(half)]);
      lambda[half] = ridge * F;
      step[half] = F > 0.f ? 2.f / ((1.f + 2.f * ridge) * F) : 0.f;
    }
  }
};

// The Chebyshev semi-iteration's weight ω_{i+1} = 1 / (1 − ρ²ω_i / 4) from ω_0 = 2, ρ = 1 / (1 + 2·ridge).
struct ChebyshevWeights {
  float quarter_rho_sq, omega = 2.f;
  __device__ __forceinline__ explicit ChebyshevWeights(float ridge) {
    const float rho = 1.f / (1.f + 2.f * ridge);
    quarter_rho_sq = 0.25f * rho * rho;
  }
  __device__ __forceinline__ float next() { return omega = 1.f / (1.f - quarter_rho_sq * omega); }
};

// The iteration's start: X = step·R, X_prev = 0.
template <int kNT> __device__ __forceinline__ void chebyshev_start(float (&X)[kNT][4], float (&Xp)[kNT][4],
                                                                   const float (&R)[kNT][4], const RowConstants& rc) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      X[nt][e] = rc.step[e >> 1] * R[nt][e];
      Xp[nt][e] = 0.f;
    }
}

// The next iterate X − step·ω·(H X + λX − R) + (ω − 1)(X − X_prev), given Y = H X, written over X_prev.
template <int kNT> __device__ __forceinline__ void chebyshev_update(float (&Xp)[kNT][4], const float (&X)[kNT][4],
                                                                    const float (&Y)[kNT][4], const float (&R)[kNT][4],
                                                                    const RowConstants& rc, float omega) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int half = e >> 1;
      const float residual = Y[nt][e] + rc.lambda[half] * X[nt][e] - R[nt][e];
      Xp[nt][e] = X[nt][e] - rc.step[half] * omega * residual + (omega - 1.f) * (X[nt][e] - Xp[nt][e]);
    }
}

// The iteration's num_iter steps after chebyshev_start, the last iterate left in X. matvec(Y, X) forms Y = H X and
// rhs(R) gives the right-hand side. Each step writes the next iterate over the previous one. kTwoSteps: a loop of two
// steps in which X and X_prev trade roles, so no register copies (which a one-step loop spends on X_prev ← X); the
// doubled loop body costs registers, which the wgmma kernel has to spare and the mma.sync kernel has not (it spills).
template <bool kTwoSteps, int kNT, class Matvec, class RightHandSide>
__device__ __forceinline__ void chebyshev_iterate(float (&X)[kNT][4], float (&Xp)[kNT][4], int num_iter, float ridge,
                                                  const RowConstants& rc, Matvec&& matvec, RightHandSide&& rhs) {
  ChebyshevWeights weights(ridge);
  const auto step = [&](float(&cur)[kNT][4], float(&prev)[kNT][4]) {
    const float omega = weights.next();
    float Y[kNT][4], R[kNT][4];
    matvec(Y, cur);
    rhs(R);
    chebyshev_update(prev, cur, Y, R, rc, omega);
  };
  const auto swap = [&] {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float t = X[nt][e];
        X[nt][e] = Xp[nt][e];
        Xp[nt][e] = t;
      }
  };
  if constexpr (kTwoSteps) {
    int it = 0;
    for (; it + 1 < num_iter; it += 2) {
      step(X, Xp);
      step(Xp, X);
    }
    if (it < num_iter) {
      step(X, Xp);
      swap();
    }
  } else {
    for (int it = 0; it < num_iter; ++it) {
      step(X, Xp);
      swap();
    }
  }
}

// Warp 0, the backward (X the adjoint s): per row w = [bp_lambda] 2·ridge·(x·s)/F and u = −s·(H x) − ½ w F², from
// dot1 = x·s and dot2 = s·(H x), then the nested B-recursion's weights W_m = w_m + e^{2gk_{m+1}} W_{m+1} (a
// reversed scan), into a.W and a.u at the chunk's rows.
__device__ __forceinline__ void adjoint_row_weights(const IterateArgs& a, int64_t bh, int64_t n, const float* G,
                                                    const float* norm, const float* dot1, const float* dot2, int len) {
  const int lane = threadIdx.x & 31;
  float w[2], a_rev[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = kC - 1 - (2 * lane + i);  // reversed order: scan index 2·lane + i
    const float F = norm[row];
    w[i] = a.bp_lambda && F > 0.f ? 2.f * a.ridge * dot1[row] / F : 0.f;
    a_rev[i] = row + 1 < kC ? __expf(2.f * (G[row + 1] - G[row])) : 0.f;
    a.u[a.geo.rows(bh, n) + row] = row < len ? -dot2[row] - 0.5f * w[i] * F * F : 0.f;
  }
  float W0, W1;
  warp_affine_scan(a_rev[0], w[0], a_rev[1], w[1], W0, W1);
  a.W[a.geo.rows(bh, n) + kC - 1 - 2 * lane] = W0;
  a.W[a.geo.rows(bh, n) + kC - 2 - 2 * lane] = W1;
}

// This thread's elements of a chunk's 64 x 64 decay mask Mᵀ[c][j] = e^{G_c−G_j} (j ≤ c < len, else 0) over the
// kNT n-tiles from column col0.
template <int kNT, class Tile>
__device__ __forceinline__ void chunk_mask(float (&mask)[kNT][4], const float* G, int len, int col0, const Tile& s) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = s.row(e >> 1), j = col0 + 8 * nt + 2 * (s.lane & 3) + (e & 1);
      mask[nt][e] = row < len && j <= row ? __expf(G[row] - G[j]) : 0.f;
    }
}

// Σ_j (j = c ? 1 : 2)·Mᵀ[c][j]·P[c][j]² over this thread's columns of P = K Kᵀ, per row c, added into fresh[].
template <int kNT, class Tile>
__device__ __forceinline__ void add_fresh_terms(float* fresh, const float (&mask)[kNT][4], const float (&p)[kNT][4],
                                                int col0, const Tile& s) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float v = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 2 * half; e < 2 * half + 2; ++e) {
        const int j = col0 + 8 * nt + 2 * (s.lane & 3) + (e & 1);
        v += (j == s.row(half) ? 1.f : 2.f) * mask[nt][e] * p[nt][e] * p[nt][e];
      }
    v = tile::row_sum(v);
    if ((s.lane & 3) == 0) atomicAdd(fresh + s.row(half), v);
  }
}

// Calls f(D, T, backward, split) with the head dimension and the I/O type as compile-time values (integral_constant,
// a T value) for the launch the dims ask for: the adjoint solve when `backward`, the hi + lo iterate when
// d.precise_iterate.
template <class F> void with_iterate_variant(const ChebyshevDims& d, DType dtype, bool backward, F&& f) {
  using std::integral_constant;
  with_dtype(dtype, [&](auto tag) {
    with_dim(d.dim, [&](auto dim) {
      if (backward && d.precise_iterate)
        f(dim, tag, integral_constant<bool, true>{}, integral_constant<bool, true>{});
      else if (backward)
        f(dim, tag, integral_constant<bool, true>{}, integral_constant<bool, false>{});
      else if (d.precise_iterate)
        f(dim, tag, integral_constant<bool, false>{}, integral_constant<bool, true>{});
      else
        f(dim, tag, integral_constant<bool, false>{}, integral_constant<bool, false>{});
    });
  });
}

}  // namespace primer::ops::cuda_ops::cheb
