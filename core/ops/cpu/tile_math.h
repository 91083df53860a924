// Small dense products on row-major tiles, shared by the CPU chunked recurrences (gated delta rule, GDN-2): the
// chunk-sized matrices they multiply fit in cache, so plain loops in the working dtype are enough.
#pragma once
#include <cstdint>

namespace primer::ops::cpu {

// C (+)= alpha · op(A) op(B): op(A) is m×p, op(B) p×n, all row-major with leading dimensions.
template <class T> void matmul(int64_t m, int64_t n, int64_t p, const T* A, int64_t lda, bool trans_a, const T* B,
                               int64_t ldb, bool trans_b, T* C, int64_t ldc, T alpha, bool accumulate) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T acc = 0;
      for (int64_t s = 0; s < p; ++s)
        acc += (trans_a ? A[s * lda + i] : A[i * lda + s]) * (trans_b ? B[j * ldb + s] : B[s * ldb + j]);
      C[i * ldc + j] = (accumulate ? C[i * ldc + j] : T(0)) + alpha * acc;
    }
}

template <class T> T dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

}  // namespace primer::ops::cpu
