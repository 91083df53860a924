// Small dense products on row-major tiles, shared by the CPU chunked recurrences (gated delta rule, GDN-2): the
// chunk-sized matrices they multiply fit in cache, so plain loops in the working dtype are enough.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace primer::ops::cpu {

// C (+)= alpha · op(A) op(B): op(A) is m×p, op(B) p×n, all row-major with leading dimensions. Every C_ij sums its p
// products in the order s = 0..p−1 from zero, a row of C at a time so that the inner loop runs along a row of op(B)
// (copied out first when B is transposed): the arithmetic of the plain triple loop, vectorisable.
template <class T> void matmul(int64_t m, int64_t n, int64_t p, const T* A, int64_t lda, bool trans_a, const T* B,
                               int64_t ldb, bool trans_b, T* C, int64_t ldc, T alpha, bool accumulate) {
  std::vector<T> bt;
  if (trans_b) {
    bt.resize(size_t(p * n));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t s = 0; s < p; ++s) bt[size_t(s * n + j)] = B[j * ldb + s];
    B = bt.data();
    ldb = n;
  }
  std::vector<T> acc(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(acc.begin(), acc.end(), T(0));
    for (int64_t s = 0; s < p; ++s) {
      const T a = trans_a ? A[s * lda + i] : A[i * lda + s];
      const T* b = B + s * ldb;
      for (int64_t j = 0; j < n; ++j) acc[size_t(j)] += a * b[j];
    }
    for (int64_t j = 0; j < n; ++j) C[i * ldc + j] = (accumulate ? C[i * ldc + j] : T(0)) + alpha * acc[size_t(j)];
  }
}

template <class T> T dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

}  // namespace primer::ops::cpu
