#include "core/ops/cpu/rmsnorm.h"

#include <cmath>

#include "core/ops/dispatch.h"

namespace primer::ops::cpu {
namespace {

// Row sums accumulate in double so that the f32 path is as accurate as the data allows.
template <class T> void forward(T* y, T* rstd, const T* x, const T* w, int64_t rows, int64_t D, double eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    double sum_sq = 0;
    for (int64_t i = 0; i < D; ++i) sum_sq += double(xr[i]) * double(xr[i]);
    const T rs = T(1.0 / std::sqrt(sum_sq / double(D) + eps));
    rstd[r] = rs;
    for (int64_t i = 0; i < D; ++i) y[r * D + i] = w[i] * (xr[i] * rs);
  }
}

// With xhat = x * rstd and g = dy * w: dx = rstd * (g - xhat * mean(g * xhat)); dw += sum_rows dy * xhat.
template <class T>
void backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t rows, int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    const T* dyr = dy + r * D;
    const double rs = double(rstd[r]);
    double dot = 0;
    for (int64_t i = 0; i < D; ++i) dot += double(dyr[i]) * double(w[i]) * double(xr[i]) * rs;
    const double mean_dot = dot / double(D);
    for (int64_t i = 0; i < D; ++i) {
      const double xhat = double(xr[i]) * rs;
      dx[r * D + i] = T(rs * (double(dyr[i]) * double(w[i]) - xhat * mean_dot));
    }
  }
  // Column-parallel so that each dw element has one writer and a fixed summation order.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < D; ++i) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += double(dy[r * D + i]) * double(x[r * D + i]) * double(rstd[r]);
    dw[i] = T(double(dw[i]) + s);
  }
}

}  // namespace

void rmsnorm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, double eps) {
  dispatch_cpu_float(x.dtype(), "rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    forward<T>(y.data<T>(), rstd.data<T>(), x.data<T>(), w.data<T>(), rstd.numel(), w.numel(), eps);
  });
}

void rmsnorm_backward(const Tensor& dx, const Tensor& dw_accum, const Tensor& dy, const Tensor& x, const Tensor& w,
                      const Tensor& rstd) {
  dispatch_cpu_float(x.dtype(), "rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    backward<T>(dx.data<T>(), dw_accum.data<T>(), dy.data<T>(), x.data<T>(), w.data<T>(), rstd.data<T>(), rstd.numel(),
                w.numel());
  });
}

}  // namespace primer::ops::cpu
