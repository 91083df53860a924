#include "core/ops/gla.h"

#include <cmath>

#include "core/ops/cpu/gla.h"
#include "core/ops/cuda/copy.h"
#include "core/ops/cuda/gla.h"
#include "core/ops/dispatch.h"
#include "core/ops/gla_check.h"

namespace primer::ops {

DType gla_state_dtype(const Tensor& q) { return q.dtype() == DType::F64 ? DType::F64 : DType::F32; }

GlaDims check_gla_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                         double scale, const Tensor& state_in) {
  PRIMER_CHECK(q.defined() && q.dim() == 4, "{}: argument 'q' is {}, expected [B, T, H, K]", op,
               q.defined() ? q.describe() : "undefined");
  const Device dev = q.device();
  if (q.is_cpu()) {
    expect(q, op, "q", dev, {DType::F32, DType::F64});
    for (auto [name, t] : {std::pair{"k", &k}, std::pair{"v", &v}, std::pair{"g", &g}})
      expect(*t, op, name, dev, {q.dtype()});
  } else {
    expect(q, op, "q", dev, {DType::BF16, DType::F32});
    expect(k, op, "k", dev, {q.dtype()});
    expect(v, op, "v", dev, {q.dtype()});
    expect(g, op, "g", dev, {DType::F32});
  }
  expect_shape(k, op, "k", q.shape());
  const GlaDims d{q.size(0), q.size(1), q.size(2), q.size(3), v.dim() == 4 ? v.size(3) : 0};
  expect_shape(v, op, "v", {d.batch, d.time, d.heads, v.dim() == 4 ? v.size(3) : -1});
  expect_shape(g, op, "g", {d.batch, d.time, d.heads});
  PRIMER_CHECK(d.key_dim > 0 && d.value_dim > 0, "{}: 'q' is {} and 'v' {}, expected K > 0 and V > 0", op, q.describe(),
               v.describe());
  if (q.is_cuda())
    PRIMER_CHECK((d.key_dim == 64 || d.key_dim == 128) && (d.value_dim == 64 || d.value_dim == 128),
                 "{}: 'q' is {} and 'v' {}: the CUDA path supports K and V of 64 or 128", op, q.describe(),
                 v.describe());
  PRIMER_CHECK(std::isfinite(scale), "{}: scale is {}, expected a finite value", op, scale);
  if (state_in.defined()) {
    expect(state_in, op, "state_in", dev, {gla_state_dtype(q)});
    expect_shape(state_in, op, "state_in", {d.batch, d.heads, d.key_dim, d.value_dim});
  }
  return d;
}

void check_gla_output_dtype(const char* op, const Tensor& v, DType out_dtype, const char* what) {
  const bool rounded = v.is_cuda() && v.dtype() == DType::F32 && out_dtype == DType::BF16;
  PRIMER_CHECK(out_dtype == v.dtype() || rounded, "{}: {} is {} for 'v' {}: expected v's dtype{}", op, what,
               dtype_name(out_dtype), v.describe(), v.is_cuda() && v.dtype() == DType::F32 ? " or bf16" : "");
}

void check_gla_output_grads(const char* op, const GlaDims& d, const Tensor& v, const Tensor& dout,
                            const Tensor& dstate_out) {
  PRIMER_CHECK(dout.defined(), "{}: argument 'dout' is undefined", op);
  check_gla_output_dtype(op, v, dout.dtype(), "dout's dtype");
  expect(dout, op, "dout", v.device(), {dout.dtype()});
  expect_shape(dout, op, "dout", v.shape());
  if (dstate_out.defined()) {
    expect(dstate_out, op, "dstate_out", v.device(), {gla_state_dtype(v)});
    expect_shape(dstate_out, op, "dstate_out", {d.batch, d.heads, d.key_dim, d.value_dim});
  }
}

namespace {

Tensor contiguous_or_null(const Tensor& t) { return t.defined() ? t.contiguous() : Tensor(); }
template <class T> T* ptr(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
Shape state_shape(const GlaDims& d) { return {d.batch, d.heads, d.key_dim, d.value_dim}; }

#ifdef PRIMER_WITH_CUDA
Tensor cuda_workspace(size_t bytes, Device device) { return Tensor::empty({int64_t(bytes)}, DType::U8, device); }
// The kernels' operands: f32 keys, values and output gradients are rounded to bf16 once (they would be rounded for
// the tensor cores anyway; a bf16 output's gradient already is), an f32 query split into hi + lo bf16 (the precise
// query of core/ops/cuda/gla.h); outputs keep the caller's dtype.
Tensor operand(const Tensor& t) { return t.to(DType::BF16); }

cuda_ops::GlaQuery query_pointers(const GlaOperands& o) {
  return {o.q_hi.data_ptr(), o.q_lo.defined() ? o.q_lo.data_ptr() : nullptr};
}

void forward_cuda(const GlaDims& d, const GlaOperands& in, const Tensor& g, double scale, const Tensor& s0,
                  const Tensor& o, const Tensor& st) {
  const Tensor ws = cuda_workspace(cuda_ops::gla_forward_workspace_bytes(d, in.q_lo.defined()), g.device());
  cuda_ops::gla_forward(d, o.dtype(), query_pointers(in), in.k.data_ptr(), in.v.data_ptr(), g.data<float>(),
                        float(scale), ptr<float>(s0), o.data_ptr(), ptr<float>(st), ws.data_ptr());
}

void backward_cuda(const GlaDims& d, const Tensor& dout, const GlaOperands& in, const Tensor& g, double scale,
                   const Tensor& s0, const Tensor& dsT, const GlaGrads& r) {
  const Tensor ws = cuda_workspace(cuda_ops::gla_backward_workspace_bytes(d, in.q_lo.defined()), g.device());
  cuda_ops::gla_backward(d, r.dk.dtype(), operand(dout).data_ptr(), query_pointers(in), in.k.data_ptr(),
                         in.v.data_ptr(), g.data<float>(), float(scale), ptr<float>(s0), ptr<float>(dsT),
                         r.dq.data_ptr(), r.dk.data_ptr(), r.dv.data_ptr(), r.dg.data<float>(), ptr<float>(r.dstate_in),
                         ws.data_ptr());
}

// The kernels' operands of q, k and v: those `given` defines (formed by the inputs' producers, or by the forward for
// the backward) checked to be of these inputs (shape, bf16, contiguous; a mismatch names the member), the rest formed
// here. An f32 query's hi and lo are handed together or not at all.
GlaOperands complete_operands(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                              const GlaOperands* given) {
  GlaOperands r = given ? *given : GlaOperands{};
  const bool precise = q.dtype() == DType::F32;
  for (auto [name, t, like] : {std::tuple{"q_hi", &r.q_hi, &q}, std::tuple{"k", &r.k, &k}, std::tuple{"v", &r.v, &v},
                               std::tuple{"q_lo", &r.q_lo, precise ? &q : nullptr}}) {
    if (!like) {
      PRIMER_CHECK(!t->defined(), "{}: operands.{} is defined for a {} query, expected it undefined", op, name,
                   dtype_name(q.dtype()));
      continue;
    }
    if (!t->defined()) continue;
    PRIMER_CHECK(t->dtype() == DType::BF16 && t->shape() == like->shape() && t->is_contiguous(),
                 "{}: operands.{} is {}, expected contiguous bf16 of shape {} (the operands of these inputs)", op, name,
                 t->describe(), shape_str(like->shape()));
  }
  if (precise)
    PRIMER_CHECK(r.q_hi.defined() == r.q_lo.defined(),
                 "{}: operands.q_lo is {} beside operands.q_hi {}: expected both halves of the f32 query's split or "
                 "neither",
                 op, r.q_lo.defined() ? "defined" : "undefined", r.q_hi.defined() ? "defined" : "undefined");
  if (!r.k.defined()) r.k = operand(k);
  if (!r.v.defined()) r.v = operand(v);
  if (!r.q_hi.defined() && !precise) r.q_hi = q;
  if (!r.q_hi.defined()) {
    r.q_hi = Tensor::empty(q.shape(), DType::BF16, q.device());
    r.q_lo = Tensor::empty(q.shape(), DType::BF16, q.device());
    cuda_ops::split_bf16(q.data<float>(), r.q_hi.data_ptr(), r.q_lo.data_ptr(), q.numel());
  }
  return r;
}
#endif

}  // namespace

Tensor gla(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& g_in, double scale,
           const Tensor& state_in, Tensor* state_out, std::optional<DType> out_dtype,
           [[maybe_unused]] GlaOperands* operands) {
  constexpr const char* op = "gla";
  const GlaDims d = check_gla_inputs(op, q_in, k_in, v_in, g_in, scale, state_in);
  check_gla_output_dtype(op, v_in, out_dtype.value_or(v_in.dtype()), "the output dtype");
  const Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous(), g = g_in.contiguous();
  const Tensor s0 = contiguous_or_null(state_in);
  Tensor o = Tensor::empty(v.shape(), out_dtype.value_or(v.dtype()), v.device());
  Tensor st = state_out ? Tensor::empty(state_shape(d), gla_state_dtype(q), q.device()) : Tensor();
  if (q.is_cpu()) {
    PRIMER_CHECK(!operands || operands->empty(),
                 "{}: operands are given for CPU inputs: expected none (they are the CUDA kernels')", op);
    dispatch_cpu_float(q.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      cpu::gla_forward<T>(d, q.data<T>(), k.data<T>(), v.data<T>(), g.data<T>(), T(scale), ptr<T>(s0), o.data<T>(),
                          ptr<T>(st));
    });
  } else {
    PRIMER_ON_CUDA({
      GlaOperands in = complete_operands(op, q, k, v, operands);
      forward_cuda(d, in, g, scale, s0, o, st);
      if (operands) *operands = std::move(in);
    });
  }
  if (state_out) *state_out = st;
  return o;
}

GlaGrads gla_backward(const Tensor& dout_in, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                      const Tensor& g_in, double scale, const Tensor& state_in, const Tensor& dstate_out,
                      [[maybe_unused]] const GlaOperands* operands) {
  constexpr const char* op = "gla_backward";
  const GlaDims d = check_gla_inputs(op, q_in, k_in, v_in, g_in, scale, state_in);
  check_gla_output_grads(op, d, v_in, dout_in, dstate_out);
  const Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous(), g = g_in.contiguous();
  const Tensor dout = dout_in.contiguous(), s0 = contiguous_or_null(state_in), dsT = contiguous_or_null(dstate_out);
  GlaGrads r;
  r.dq = Tensor::empty(q.shape(), q.dtype(), q.device());
  r.dk = Tensor::empty(k.shape(), k.dtype(), k.device());
  r.dv = Tensor::empty(v.shape(), v.dtype(), v.device());
  r.dg = Tensor::empty(g.shape(), g.dtype(), g.device());
  if (state_in.defined()) r.dstate_in = Tensor::empty(state_shape(d), state_in.dtype(), q.device());
  if (q.is_cpu()) {
    dispatch_cpu_float(q.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      cpu::gla_backward<T>(d, dout.data<T>(), q.data<T>(), k.data<T>(), v.data<T>(), g.data<T>(), T(scale), ptr<T>(s0),
                           ptr<T>(dsT), r.dq.data<T>(), r.dk.data<T>(), r.dv.data<T>(), r.dg.data<T>(),
                           ptr<T>(r.dstate_in));
    });
  } else {
    PRIMER_ON_CUDA(backward_cuda(d, dout, complete_operands(op, q, k, v, operands), g, scale, s0, dsT, r));
  }
  return r;
}

}  // namespace primer::ops
