#include "core/ops/cpu/gemm.h"

#include <algorithm>
#include <vector>

#include "core/ops/dispatch.h"

#ifdef PRIMER_WITH_OPENBLAS
#include <cblas.h>
#endif

namespace primer::ops::cpu {
namespace {

#ifdef PRIMER_WITH_OPENBLAS

void blas_gemm(const GemmArgs& g, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans, int(g.m),
              int(g.n), int(g.k), float(g.alpha), a, int(g.lda), b, int(g.ldb), float(g.beta), c, int(g.ldc));
}
void blas_gemm(const GemmArgs& g, const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans, int(g.m),
              int(g.n), int(g.k), g.alpha, a, int(g.lda), b, int(g.ldb), g.beta, c, int(g.ldc));
}

template <class T> void gemm_one(const GemmArgs& g, const T* a, const T* b, T* c) { blas_gemm(g, a, b, c); }

#else

// Tiles sized so that one packed A tile, one packed B tile and the accumulator fit in L2.
constexpr int64_t kTileM = 64, kTileN = 256, kTileK = 256;

// Blocked kernel: each (row tile, column tile) of C is one task; op(A) and op(B) tiles are packed row-major so the
// inner loop is a unit-stride axpy the compiler vectorises. beta == 0 never reads C (it may hold NaN).
template <class T> void gemm_one(const GemmArgs& g, const T* a, const T* b, T* c) {
  const int64_t tiles_m = (g.m + kTileM - 1) / kTileM, tiles_n = (g.n + kTileN - 1) / kTileN;
  auto a_at = [&](int64_t i, int64_t p) { return g.trans_a ? a[p * g.lda + i] : a[i * g.lda + p]; };
  auto b_at = [&](int64_t p, int64_t j) { return g.trans_b ? b[j * g.ldb + p] : b[p * g.ldb + j]; };
#pragma omp parallel
  {
    std::vector<T> pa(kTileM * kTileK), pb(kTileK * kTileN), acc(kTileM * kTileN);
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t tm = 0; tm < tiles_m; ++tm) {
      for (int64_t tn = 0; tn < tiles_n; ++tn) {
        const int64_t i0 = tm * kTileM, j0 = tn * kTileN;
        const int64_t mb = std::min(kTileM, g.m - i0), nb = std::min(kTileN, g.n - j0);
        std::fill(acc.begin(), acc.begin() + mb * nb, T(0));
        for (int64_t p0 = 0; p0 < g.k; p0 += kTileK) {
          const int64_t kb = std::min(kTileK, g.k - p0);
          for (int64_t i = 0; i < mb; ++i)
            for (int64_t p = 0; p < kb; ++p) pa[i * kb + p] = a_at(i0 + i, p0 + p);
          for (int64_t p = 0; p < kb; ++p)
            for (int64_t j = 0; j < nb; ++j) pb[p * nb + j] = b_at(p0 + p, j0 + j);
          for (int64_t i = 0; i < mb; ++i) {
            T* acc_row = acc.data() + i * nb;
            for (int64_t p = 0; p < kb; ++p) {
              const T av = pa[i * kb + p];
              const T* b_row = pb.data() + p * nb;
#pragma omp simd
              for (int64_t j = 0; j < nb; ++j) acc_row[j] += av * b_row[j];
            }
          }
        }
        for (int64_t i = 0; i < mb; ++i) {
          T* c_row = c + (i0 + i) * g.ldc + j0;
          for (int64_t j = 0; j < nb; ++j)
            c_row[j] = T(g.alpha) * acc[i * nb + j] + (g.beta == 0 ? T(0) : T(g.beta) * c_row[j]);
        }
      }
    }
  }
}

#endif

}  // namespace

void gemm(const GemmArgs& g) {
  dispatch_cpu_float(g.c_type, "gemm", [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < g.batch; ++i)
      gemm_one<T>(g, static_cast<const T*>(g.a) + i * g.stride_a, static_cast<const T*>(g.b) + i * g.stride_b,
                  static_cast<T*>(g.c) + i * g.stride_c);
  });
}

}  // namespace primer::ops::cpu
