#include "core/ops/cpu/embedding.h"

namespace primer::ops::cpu {

namespace {
int64_t id_at(const void* ids, DType id_dtype, int64_t n) {
  return id_dtype == DType::I64 ? static_cast<const int64_t*>(ids)[n] : static_cast<const int32_t*>(ids)[n];
}
}  // namespace

template <class T>
void embedding(const T* weight, const void* ids, DType id_dtype, int64_t n_tokens, int64_t dim, T* out) {
#pragma omp parallel for schedule(static) if (n_tokens * dim > (1 << 16))
  for (int64_t n = 0; n < n_tokens; ++n) {
    const T* row = weight + id_at(ids, id_dtype, n) * dim;
    for (int64_t d = 0; d < dim; ++d) out[n * dim + d] = row[d];
  }
}

template <class T>
void embedding_backward(const T* dy, const void* ids, DType id_dtype, int64_t n_tokens, int64_t dim, T* dweight) {
  // Threads own column blocks, so repeated ids never race and every row sums its tokens in order.
  constexpr int64_t kCols = 64;
#pragma omp parallel for schedule(static) if (n_tokens * dim > (1 << 16))
  for (int64_t d0 = 0; d0 < dim; d0 += kCols) {
    const int64_t d1 = d0 + kCols < dim ? d0 + kCols : dim;
    for (int64_t n = 0; n < n_tokens; ++n) {
      T* row = dweight + id_at(ids, id_dtype, n) * dim;
      for (int64_t d = d0; d < d1; ++d) row[d] += dy[n * dim + d];
    }
  }
}

template void embedding<float>(const float*, const void*, DType, int64_t, int64_t, float*);
template void embedding<double>(const double*, const void*, DType, int64_t, int64_t, double*);
template void embedding_backward<float>(const float*, const void*, DType, int64_t, int64_t, float*);
template void embedding_backward<double>(const double*, const void*, DType, int64_t, int64_t, double*);

}  // namespace primer::ops::cpu
