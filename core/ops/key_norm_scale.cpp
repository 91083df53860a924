#include "core/ops/key_norm_scale.h"

#include <cmath>

#include "core/ops/dispatch.h"

namespace primer::ops {
namespace {

// k [..., K] and v [..., V] on the CPU with the same leading dims and one float dtype; returns the leading shape.
// (On CUDA the gated delta rule's kernels form k̂ and v̂ themselves: ops::gated_delta_rule's raw_key_eps.)
Shape check_rows(const char* op, const Tensor& k, const Tensor& v) {
  expect_float(k, op, "k", Device::cpu());
  expect(v, op, "v", Device::cpu(), {k.dtype()});
  PRIMER_CHECK(k.dim() >= 1 && v.dim() == k.dim() && k.size(-1) > 0 && v.size(-1) > 0,
               "{}: k is {} and v {}, expected [..., K] and [..., V] with the same leading dims", op, k.describe(),
               v.describe());
  Shape rows(k.shape().begin(), k.shape().end() - 1);
  PRIMER_CHECK(Shape(v.shape().begin(), v.shape().end() - 1) == rows,
               "{}: k is {} and v {}, expected the same leading dims", op, k.describe(), v.describe());
  return rows;
}

template <class T>
void forward_cpu(T* k_hat, T* v_hat, T* r_out, const T* k, const T* v, int64_t rows, int64_t K, int64_t V, double eps) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    double sum_sq = eps;
    for (int64_t i = 0; i < K; ++i) sum_sq += double(k[row * K + i]) * double(k[row * K + i]);
    const T r = T(1.0 / std::sqrt(sum_sq));
    r_out[row] = r;
    for (int64_t i = 0; i < K; ++i) k_hat[row * K + i] = r * k[row * K + i];
    for (int64_t i = 0; i < V; ++i) v_hat[row * V + i] = r * v[row * V + i];
  }
}

template <class T> void backward_cpu(T* dk, T* dv, const T* dk_hat, const T* dv_hat, const T* k, const T* v,
                                     const T* r_in, int64_t rows, int64_t K, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    double dot = 0;
    for (int64_t i = 0; i < K; ++i) dot += double(dk_hat[row * K + i]) * double(k[row * K + i]);
    for (int64_t i = 0; i < V; ++i) dot += double(dv_hat[row * V + i]) * double(v[row * V + i]);
    const double r = double(r_in[row]), c = dot * r * r * r;
    for (int64_t i = 0; i < K; ++i) dk[row * K + i] = T(r * double(dk_hat[row * K + i]) - c * double(k[row * K + i]));
    for (int64_t i = 0; i < V; ++i) dv[row * V + i] = T(r * double(dv_hat[row * V + i]));
  }
}

}  // namespace

KeyNormScaled key_norm_scale(const Tensor& k, const Tensor& v, double eps) {
  constexpr const char* op = "key_norm_scale";
  const Shape rows_shape = check_rows(op, k, v);
  PRIMER_CHECK(eps >= 0 && std::isfinite(eps), "{}: eps is {}, expected a finite number ≥ 0", op, eps);
  const int64_t K = k.size(-1), V = v.size(-1), rows = shape_numel(rows_shape);
  const Tensor kc = k.contiguous(), vc = v.contiguous();
  KeyNormScaled out{Tensor::empty(k.shape(), k.dtype(), k.device()), Tensor::empty(v.shape(), v.dtype(), v.device()),
                    Tensor::empty(rows_shape, accum_dtype(k.dtype()), k.device())};
  dispatch_cpu_float(k.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    forward_cpu<T>(out.k.data<T>(), out.v.data<T>(), out.r.data<T>(), kc.data<T>(), vc.data<T>(), rows, K, V, eps);
  });
  return out;
}

KeyNormScaleGrads key_norm_scale_backward(const Tensor& dk_hat, const Tensor& dv_hat, const Tensor& k, const Tensor& v,
                                          const Tensor& r) {
  constexpr const char* op = "key_norm_scale_backward";
  const Shape rows_shape = check_rows(op, k, v);
  expect(dk_hat, op, "dk_hat", k.device(), {k.dtype()});
  expect_shape(dk_hat, op, "dk_hat", k.shape());
  expect(dv_hat, op, "dv_hat", k.device(), {k.dtype()});
  expect_shape(dv_hat, op, "dv_hat", v.shape());
  expect(r, op, "r", k.device(), {accum_dtype(k.dtype())});
  expect_shape(r, op, "r", rows_shape);
  const int64_t K = k.size(-1), V = v.size(-1), rows = shape_numel(rows_shape);
  const Tensor kc = k.contiguous(), vc = v.contiguous(), dkc = dk_hat.contiguous(), dvc = dv_hat.contiguous(),
               rc = r.contiguous();
  KeyNormScaleGrads g{Tensor::empty(k.shape(), k.dtype(), k.device()), Tensor::empty(v.shape(), v.dtype(), v.device())};
  dispatch_cpu_float(k.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    backward_cpu<T>(g.dk.data<T>(), g.dv.data<T>(), dkc.data<T>(), dvc.data<T>(), kc.data<T>(), vc.data<T>(),
                    rc.data<T>(), rows, K, V);
  });
  return g;
}

}  // namespace primer::ops
