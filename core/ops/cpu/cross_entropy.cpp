#include "core/ops/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "core/ops/dispatch.h"

namespace primer::ops::cpu {

void xent_rows(DType dt, void* logits, const int32_t* targets, int64_t rows, int64_t vocab, int64_t ignore_index,
               double grad_scale, void* row_loss) {
  for (int64_t r = 0; r < rows; ++r)
    PRIMER_CHECK(targets[r] == ignore_index || (targets[r] >= 0 && targets[r] < vocab),
                 "fused_linear_cross_entropy: target {} of row {} is outside [0, {}) and is not ignore_index {}",
                 targets[r], r, vocab, ignore_index);
  dispatch_cpu_float(dt, "fused_linear_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      T* z = static_cast<T*>(logits) + r * vocab;
      T& loss = static_cast<T*>(row_loss)[r];
      if (targets[r] == ignore_index) {
        std::fill(z, z + vocab, T(0));
        loss = T(0);
        continue;
      }
      const T max = *std::max_element(z, z + vocab);
      T sum = 0;
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(z[j] - max);
      const T lse = max + std::log(sum);
      loss = lse - z[targets[r]];
      for (int64_t j = 0; j < vocab; ++j) z[j] = T(grad_scale) * std::exp(z[j] - lse);
      z[targets[r]] -= T(grad_scale);
    }
  });
}

void sum_losses(DType dt, const void* row_loss, int64_t n, void* out) {
  dispatch_cpu_float(dt, "fused_linear_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* l = static_cast<const T*>(row_loss);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(l[i]);
    *static_cast<T*>(out) = T(s);
  });
}

}  // namespace primer::ops::cpu
