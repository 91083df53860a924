#include "core/ops/cpu/reduce.h"

#include <vector>

#include "core/ops/dispatch.h"

namespace primer::ops::cpu {

void sum_dim(void* out, const void* x, DType dtype, int64_t outer, int64_t r, int64_t inner, double multiplier) {
  dispatch_cpu_float(dtype, "sum", [&](auto t) {
    using T = decltype(t);
    const T* px = static_cast<const T*>(x);
    T* po = static_cast<T*>(out);
#pragma omp parallel for schedule(static) if (outer * r * inner > (1 << 16) && outer > 1)
    for (int64_t o = 0; o < outer; ++o) {
      std::vector<double> acc(size_t(inner), 0.0);  // rows of x are read in memory order
      for (int64_t k = 0; k < r; ++k) {
        const T* row = px + (o * r + k) * inner;
        for (int64_t c = 0; c < inner; ++c) acc[size_t(c)] += double(row[c]);
      }
      for (int64_t c = 0; c < inner; ++c) po[o * inner + c] = T(acc[size_t(c)] * multiplier);
    }
  });
}

void sum_all(void* out, const void* x, DType dtype, int64_t n, bool squares) {
  dispatch_cpu_float(dtype, squares ? "sumsq_all" : "sum_all", [&](auto t) {
    using T = decltype(t);
    const T* px = static_cast<const T*>(x);
    double acc = 0;
#pragma omp parallel for schedule(static) reduction(+ : acc) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) acc += squares ? double(px[i]) * double(px[i]) : double(px[i]);
    *static_cast<T*>(out) = T(acc);
  });
}

}  // namespace primer::ops::cpu
