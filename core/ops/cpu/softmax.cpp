#include "core/ops/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/dispatch.h"

namespace primer::ops::cpu {

void softmax(void* y, const void* x, DType dtype, int64_t rows, int64_t cols) {
  dispatch_cpu_float(dtype, "softmax", [&](auto t) {
    using T = decltype(t);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15) && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = px + r * cols;
      T* yr = py + r * cols;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < cols; ++c) m = std::max(m, double(xr[c]));
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += std::exp(double(xr[c]) - m);
      for (int64_t c = 0; c < cols; ++c) yr[c] = T(std::exp(double(xr[c]) - m) / s);
    }
  });
}

void softmax_backward(void* dx, const void* y, const void* dy, DType dtype, int64_t rows, int64_t cols) {
  dispatch_cpu_float(dtype, "softmax_backward", [&](auto t) {
    using T = decltype(t);
    const T* py = static_cast<const T*>(y);
    const T* pdy = static_cast<const T*>(dy);
    T* pdx = static_cast<T*>(dx);
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15) && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t base = r * cols;
      double dot = 0;
      for (int64_t c = 0; c < cols; ++c) dot += double(pdy[base + c]) * double(py[base + c]);
      for (int64_t c = 0; c < cols; ++c) pdx[base + c] = T(double(py[base + c]) * (double(pdy[base + c]) - dot));
    }
  });
}

}  // namespace primer::ops::cpu
