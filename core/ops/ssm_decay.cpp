#include "core/ops/ssm_decay.h"

#include <cmath>

#include "core/ops/cuda/ssm_decay.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise_math.h"
#include "core/ops/reduce.h"

namespace primer::ops {
namespace {

// a is [rows, params]; A_log entry p / group for value p.
using Layout = cuda_ops::SsmDecayDims;

// a [..., P] with dt_bias's shape trailing; A_log and dt_bias in one parameter dtype (f32; f64 too on the CPU).
Layout check_layout(const char* op, const Tensor& a, const Tensor& A_log, const Tensor& dt_bias) {
  expect_float(a, op, "a", a.device());
  if (a.is_cpu())
    expect(A_log, op, "A_log", a.device(), {DType::F32, DType::F64});
  else
    expect(A_log, op, "A_log", a.device(), {DType::F32});
  expect(dt_bias, op, "dt_bias", a.device(), {A_log.dtype()});
  const Shape& bias_shape = dt_bias.shape();
  const bool trailing = a.dim() >= int(bias_shape.size()) &&
                        Shape(a.shape().end() - ptrdiff_t(bias_shape.size()), a.shape().end()) == bias_shape;
  PRIMER_CHECK(trailing && dt_bias.numel() > 0, "{}: a is {}, expected dt_bias's shape {} as its last dims", op,
               a.describe(), shape_str(bias_shape));
  const int64_t P = dt_bias.numel(), A = A_log.numel();
  PRIMER_CHECK(A > 0 && P % A == 0, "{}: A_log {} does not divide dt_bias's {} values into equal groups", op,
               A_log.describe(), P);
  return {a.numel() / P, P, P / A};
}

template <class Ta, class Tp>
void forward_cpu(Tp* g, Tp* delta, const Ta* a, const Tp* A_log, const Tp* dt_bias, const Layout& l) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < l.rows * l.params; ++i) {
    const int64_t p = i % l.params;
    const double step = math::unary(Unary::Softplus, double(a[i]) + double(dt_bias[p]));
    g[i] = Tp(-std::exp(double(A_log[p / l.group])) * step);
    if (delta) delta[i] = Tp(step);
  }
}

template <class Ta, class Tp> void backward_cpu(Ta* da, Tp* dz_out, Tp* dg_g, const Tp* dg, const Tp* ddelta,
                                                const Ta* a, const Tp* A_log, const Tp* dt_bias, const Layout& l) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < l.rows * l.params; ++i) {
    const int64_t p = i % l.params;
    const double z = double(a[i]) + double(dt_bias[p]), rate = std::exp(double(A_log[p / l.group]));
    const double dgi = dg ? double(dg[i]) : 0.0;
    const double dz = ((ddelta ? double(ddelta[i]) : 0.0) - dgi * rate) * math::sigmoid(z);
    da[i] = Ta(dz);
    dz_out[i] = Tp(dz);
    dg_g[i] = Tp(-dgi * rate * math::unary(Unary::Softplus, z));
  }
}

// Calls f(Ta{}, Tp{}) with the CPU types of a and of the parameters.
template <class F> void dispatch_cpu(DType a_dtype, DType param_dtype, const char* op, F&& f) {
  dispatch_cpu_float(a_dtype, op,
                     [&](auto a_tag) { dispatch_cpu_float(param_dtype, op, [&](auto p_tag) { f(a_tag, p_tag); }); });
}

}  // namespace

Tensor ssm_decay(const Tensor& a, const Tensor& A_log, const Tensor& dt_bias, Tensor* delta) {
  constexpr const char* op = "ssm_decay";
  const Layout l = check_layout(op, a, A_log, dt_bias);
  const Tensor ac = a.contiguous(), Ac = A_log.contiguous(), bc = dt_bias.contiguous();
  Tensor g = Tensor::empty(a.shape(), A_log.dtype(), a.device());
  const Tensor step = delta ? Tensor::empty(a.shape(), A_log.dtype(), a.device()) : Tensor();
  if (a.is_cpu()) {
    dispatch_cpu(a.dtype(), A_log.dtype(), op, [&](auto a_tag, auto p_tag) {
      using Ta = decltype(a_tag);
      using Tp = decltype(p_tag);
      forward_cpu<Ta, Tp>(g.data<Tp>(), data_or_null<Tp>(step), ac.data<Ta>(), Ac.data<Tp>(), bc.data<Tp>(), l);
    });
  } else {
    PRIMER_ON_CUDA(cuda_ops::ssm_decay_forward(g.data<float>(), data_or_null<float>(step), ac.data_ptr(),
                                               Ac.data<float>(), bc.data<float>(), l, a.dtype()));
  }
  if (delta) *delta = step;
  return g;
}

SsmDecayGrads ssm_decay_backward(const Tensor& dg, const Tensor& ddelta, const Tensor& a, const Tensor& A_log,
                                 const Tensor& dt_bias) {
  constexpr const char* op = "ssm_decay_backward";
  const Layout l = check_layout(op, a, A_log, dt_bias);
  for (const auto& [t, name] : {std::pair{&dg, "dg"}, std::pair{&ddelta, "ddelta"}}) {
    if (!t->defined()) continue;
    expect(*t, op, name, a.device(), {A_log.dtype()});
    expect_shape(*t, op, name, a.shape());
  }
  const Tensor ac = a.contiguous(), Ac = A_log.contiguous(), bc = dt_bias.contiguous();
  const Tensor dgc = dg.defined() ? dg.contiguous() : Tensor(), ddc = ddelta.defined() ? ddelta.contiguous() : Tensor();
  SsmDecayGrads grads;
  grads.da = Tensor::empty(a.shape(), a.dtype(), a.device());
  const Tensor dz = Tensor::empty({l.rows, l.params}, A_log.dtype(), a.device());
  const Tensor dg_g = Tensor::empty({l.rows, l.params}, A_log.dtype(), a.device());
  if (a.is_cpu()) {
    dispatch_cpu(a.dtype(), A_log.dtype(), op, [&](auto a_tag, auto p_tag) {
      using Ta = decltype(a_tag);
      using Tp = decltype(p_tag);
      backward_cpu<Ta, Tp>(grads.da.data<Ta>(), dz.data<Tp>(), dg_g.data<Tp>(), data_or_null<Tp>(dgc),
                           data_or_null<Tp>(ddc), ac.data<Ta>(), Ac.data<Tp>(), bc.data<Tp>(), l);
    });
  } else {
    PRIMER_ON_CUDA(cuda_ops::ssm_decay_backward(grads.da.data_ptr(), dz.data<float>(), dg_g.data<float>(),
                                                data_or_null<float>(dgc), data_or_null<float>(ddc), ac.data_ptr(),
                                                Ac.data<float>(), bc.data<float>(), l, a.dtype()));
  }
  // The parameters' sums over rows (fixed order), then over each A_log entry's group of dt_bias values.
  grads.ddt_bias = sum(dz, 0).view(dt_bias.shape());
  const Tensor per_param = sum(dg_g, 0);
  grads.dA_log = (l.group == 1 ? per_param : sum(per_param.view({l.params / l.group, l.group}), 1)).view(A_log.shape());
  return grads;
}

}  // namespace primer::ops
