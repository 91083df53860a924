#include "core/ops/cpu/rmsnorm.h"

#include <cmath>

#include "core/ops/dispatch.h"

namespace primer::ops::cpu {
namespace {

// One element's view of the variant: u = the normalised input (x, or x ⊙ silu(z) under gate Before), s = silu(z),
// ds = silu'(z) = σ(z)·(1 + z·(1 − σ(z))). Math in double so that the f32 path is as accurate as the data allows.
struct Elem {
  double u, s, ds;
};

template <class T> Elem element(T x, const T* z, int64_t i, NormGate gate) {
  if (gate == NormGate::None) return {double(x), 1.0, 0.0};
  const double zi = double(z[i]), sig = 1.0 / (1.0 + std::exp(-zi));
  const double s = zi * sig, ds = sig * (1.0 + zi * (1.0 - sig));
  return {gate == NormGate::Before ? double(x) * s : double(x), s, ds};
}

template <class T> struct Rows {
  int64_t rows, D, G;  // G: weight rows (0: unit weight)
  double weight(const T* w, int64_t r, int64_t i) const { return G ? double(w[(r % G) * D + i]) : 1.0; }
};

template <class T>
void forward(T* y, T* rstd, const T* x, const T* w, const T* z, const Rows<T>& shape, const NormSpec& spec) {
  const int64_t D = shape.D;
  const double inv_n = spec.l2 ? 1.0 : 1.0 / double(D);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < shape.rows; ++r) {
    const T* xr = x + r * D;
    const T* zr = z ? z + r * D : nullptr;
    double sum_sq = 0;
    for (int64_t i = 0; i < D; ++i) {
      const double u = element(xr[i], zr, i, spec.gate).u;
      sum_sq += u * u;
    }
    const T rs = T(1.0 / std::sqrt(sum_sq * inv_n + spec.eps));
    rstd[r] = rs;
    for (int64_t i = 0; i < D; ++i) {
      const Elem e = element(xr[i], zr, i, spec.gate);
      const double n = shape.weight(w, r, i) * (e.u * double(rs));
      y[r * D + i] = T(spec.gate == NormGate::After ? n * e.s : n);
    }
  }
}

// With û = u·r and g = dy·w (·s under gate After): du = r·(g − û·inv_n·Σ g·û); then dx = du (·s under Before),
// dz = du·x·silu'(z) (Before) or dy·w·û·silu'(z) (After); dw += dy·û (·s under After).
template <class T> void backward(T* dx, T* dz, T* dw, const T* dy, const T* x, const T* w, const T* z, const T* rstd,
                                 const Rows<T>& shape, const NormSpec& spec) {
  const int64_t D = shape.D, G = shape.G;
  const double inv_n = spec.l2 ? 1.0 : 1.0 / double(D);
  auto z_row = [&](int64_t r) { return z ? z + r * D : nullptr; };
  auto gated_dy = [&](int64_t r, int64_t i) {
    const double d = double(dy[r * D + i]);
    return spec.gate == NormGate::After ? d * element(x[r * D + i], z_row(r), i, spec.gate).s : d;
  };
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < shape.rows; ++r) {
    const T* xr = x + r * D;
    const T* zr = z_row(r);
    const double rs = double(rstd[r]), to_uhat = spec.from_output ? 1.0 : rs;  // x itself is û when it is the output
    double dot = 0;
    for (int64_t i = 0; i < D; ++i)
      dot += gated_dy(r, i) * shape.weight(w, r, i) * element(xr[i], zr, i, spec.gate).u * to_uhat;
    for (int64_t i = 0; i < D; ++i) {
      const Elem e = element(xr[i], zr, i, spec.gate);
      const double wi = shape.weight(w, r, i), uhat = e.u * to_uhat;
      const double du = rs * (gated_dy(r, i) * wi - uhat * dot * inv_n);
      dx[r * D + i] = T(spec.gate == NormGate::Before ? du * e.s : du);
      if (spec.gate == NormGate::Before) dz[r * D + i] = T(du * double(xr[i]) * e.ds);
      if (spec.gate == NormGate::After) dz[r * D + i] = T(double(dy[r * D + i]) * wi * uhat * e.ds);
    }
  }
  if (!G) return;
    // Weight-parallel so that each dw element has one writer and a fixed summation order.
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < G * D; ++c) {
    const int64_t g = c / D, i = c % D;
    double s = 0;
    for (int64_t r = g; r < shape.rows; r += G)
      s += gated_dy(r, i) * element(x[r * D + i], z_row(r), i, spec.gate).u * double(rstd[r]);
    dw[c] = T(double(dw[c]) + s);
  }
}

template <class T> Rows<T> rows_of(const Tensor& x, const Tensor& w) {
  const int64_t D = x.size(-1);
  return {x.numel() / D, D, w.defined() ? w.numel() / D : 0};
}

}  // namespace

void rmsnorm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& z,
             const NormSpec& spec) {
  dispatch_cpu_float(x.dtype(), "rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    forward<T>(y.data<T>(), rstd.data<T>(), x.data<T>(), data_or_null<T>(w), data_or_null<T>(z), rows_of<T>(x, w),
               spec);
  });
}

void rmsnorm_backward(const Tensor& dx, const Tensor& dz, const Tensor& dw_accum, const Tensor& dy, const Tensor& x,
                      const Tensor& w, const Tensor& z, const Tensor& rstd, const NormSpec& spec) {
  dispatch_cpu_float(x.dtype(), "rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    backward<T>(dx.data<T>(), data_or_null<T>(dz), data_or_null<T>(dw_accum), dy.data<T>(), x.data<T>(),
                data_or_null<T>(w), data_or_null<T>(z), rstd.data<T>(), rows_of<T>(x, w), spec);
  });
}

}  // namespace primer::ops::cpu
