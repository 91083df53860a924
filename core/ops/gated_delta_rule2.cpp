#include "core/ops/gated_delta_rule2.h"

#include <cmath>

#include "core/ops/cpu/gated_delta_rule2.h"
#include "core/ops/cuda/gated_delta_rule2.h"
#include "core/ops/cuda/gated_delta_rule2_chunked.h"
#include "core/ops/dispatch.h"

namespace primer::ops {
namespace {

using cpu::GatedDelta2Dims;

// The dtype of the gates and states: the token dtype on the CPU (f32 or f64 throughout), f32 on CUDA (whose q, k, v
// and o may be bf16).
DType gate_dtype(const Tensor& q) { return q.is_cpu() ? q.dtype() : DType::F32; }

// Validates the forward's arguments (shared by the backward) and returns the sizes.
GatedDelta2Dims check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                             const Tensor& b, const Tensor& w, double scale, const Tensor& state_in) {
  PRIMER_CHECK(q.defined() && q.dim() == 4, "{}: argument 'q' is {}, expected [B, T, H, K]", op,
               q.defined() ? q.describe() : "undefined");
  if (q.is_cpu())
    expect(q, op, "q", q.device(), {DType::F32, DType::F64});
  else
    expect(q, op, "q", q.device(), {DType::F32, DType::BF16});
  const DType gates = gate_dtype(q);
  for (const auto& [t, name] : {std::pair{&k, "k"}, {&v, "v"}}) expect(*t, op, name, q.device(), {q.dtype()});
  for (const auto& [t, name] : {std::pair{&g, "g"}, {&b, "b"}, {&w, "w"}}) expect(*t, op, name, q.device(), {gates});
  PRIMER_CHECK(v.dim() == 4 && v.size(0) == q.size(0) && v.size(1) == q.size(1) && v.size(2) == q.size(2),
               "{}: argument 'v' is {}, expected [B, T, H, V] with [B, T, H] = [{}, {}, {}] as q", op, v.describe(),
               q.size(0), q.size(1), q.size(2));
  const GatedDelta2Dims d{q.size(0), q.size(1), q.size(2), q.size(3), v.size(3), scale};
  expect_shape(k, op, "k", q.shape());
  expect_shape(g, op, "g", q.shape());
  expect_shape(b, op, "b", q.shape());
  expect_shape(w, op, "w", v.shape());
  PRIMER_CHECK(d.key_dim > 0 && d.value_dim > 0, "{}: q is {} and v {}, expected non-empty head dims", op, q.describe(),
               v.describe());
  PRIMER_CHECK(q.is_cpu() || d.key_dim <= 128, "{}: q is {}; on CUDA the key head dim (q's last) is at most 128", op,
               q.describe());
  PRIMER_CHECK(std::isfinite(scale), "{}: scale is {}, expected a finite number", op, scale);
  if (state_in.defined()) {
    expect(state_in, op, "state_in", q.device(), {gates});
    expect_shape(state_in, op, "state_in", {d.batch, d.heads, d.key_dim, d.value_dim});
  }
  return d;
}

void check_output_grads(const char* op, const GatedDelta2Dims& d, const Tensor& dout, const Tensor& dstate_out,
                        const Tensor& q, const Tensor& v) {
  expect(dout, op, "dout", q.device(), {q.dtype()});
  expect_shape(dout, op, "dout", v.shape());
  if (dstate_out.defined()) {
    expect(dstate_out, op, "dstate_out", q.device(), {gate_dtype(q)});
    expect_shape(dstate_out, op, "dstate_out", {d.batch, d.heads, d.key_dim, d.value_dim});
  }
}

void expect_f64(const char* op, const Tensor& q) {
  PRIMER_CHECK(q.dtype() == DType::F64, "{}: the reference computes in f64, got q {}", op, q.describe());
}

Shape state_shape(const GatedDelta2Dims& d) { return {d.batch, d.heads, d.key_dim, d.value_dim}; }
Tensor contiguous_or_null(const Tensor& t) { return t.defined() ? t.contiguous() : Tensor(); }
template <class T> T* ptr(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

// The inputs made dense, in the order q, k, v, g, b, w, state_in.
struct Dense {
  Tensor q, k, v, g, b, w, s;
  Dense(const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& g_, const Tensor& b_, const Tensor& w_,
        const Tensor& s_)
      : q(q_.contiguous()),
        k(k_.contiguous()),
        v(v_.contiguous()),
        g(g_.contiguous()),
        b(b_.contiguous()),
        w(w_.contiguous()),
        s(contiguous_or_null(s_)) {}
};

// Forward of either implementation: run(dims, dense inputs, o, state_out or undefined) in the inputs' dtype.
template <class Run> Tensor forward(const char* op, bool reference, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& g, const Tensor& b, const Tensor& w, double scale,
                                    const Tensor& state_in, Tensor* state_out, Run run) {
  const GatedDelta2Dims d = check_inputs(op, q, k, v, g, b, w, scale, state_in);
  if (reference) expect_f64(op, q);
  const Dense x(q, k, v, g, b, w, state_in);
  const Tensor o = Tensor::empty(v.shape(), q.dtype());
  const Tensor st = state_out ? Tensor::empty(state_shape(d), q.dtype()) : Tensor();
  run(d, x, o, st);
  if (state_out) *state_out = st;
  return o;
}

template <class Run> GatedDelta2Grads backward(const char* op, bool reference, const Tensor& dout, const Tensor& q,
                                               const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& b,
                                               const Tensor& w, double scale, const Tensor& state_in,
                                               const Tensor& dstate_out, Run run) {
  const GatedDelta2Dims d = check_inputs(op, q, k, v, g, b, w, scale, state_in);
  if (reference) expect_f64(op, q);
  check_output_grads(op, d, dout, dstate_out, q, v);
  const Dense x(q, k, v, g, b, w, state_in);
  const DType dt = q.dtype();
  GatedDelta2Grads r{Tensor::empty(q.shape(), dt),
                     Tensor::empty(k.shape(), dt),
                     Tensor::empty(v.shape(), dt),
                     Tensor::empty(g.shape(), dt),
                     Tensor::empty(b.shape(), dt),
                     Tensor::empty(w.shape(), dt),
                     state_in.defined() ? Tensor::empty(state_shape(d), dt) : Tensor()};
  run(d, x, dout.contiguous(), contiguous_or_null(dstate_out), r);
  return r;
}

[[maybe_unused]] cuda_ops::GatedDelta2Shape cuda_shape(const GatedDelta2Dims& d) {
  return {d.batch, d.time, d.heads, d.key_dim, d.value_dim};
}
[[maybe_unused]] const float* f32_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
[[maybe_unused]] float* f32_or_null(Tensor* t) { return t && t->defined() ? t->data<float>() : nullptr; }

#ifdef PRIMER_WITH_CUDA
bool chunked(const GatedDelta2Dims& d, const Dense& x, GatedDelta2Kernels kernels) {
  if (kernels == GatedDelta2Kernels::recurrent) return false;
  const bool applies = cuda_ops::gated_delta_rule2_chunked_supports(cuda_shape(d), x.q.dtype());
  PRIMER_CHECK(applies || kernels != GatedDelta2Kernels::chunked,
               "gated_delta_rule2: the chunked kernels were asked for, but they take bf16 q, k, v with K = V in "
               "{{64, 128}}; got q {} with K = {}, V = {}",
               x.q.describe(), d.key_dim, d.value_dim);
  return applies && (kernels == GatedDelta2Kernels::chunked || d.time > kGatedDelta2RecurrentTokens);
}
int64_t workspace_bytes(const GatedDelta2Dims& d, bool backward) {
  return int64_t(cuda_ops::gated_delta_rule2_chunked_workspace_bytes(cuda_shape(d), backward));
}
Tensor workspace(const GatedDelta2Dims& d, bool backward, Device device) {
  return Tensor::empty({workspace_bytes(d, backward)}, DType::U8, device);
}
#else
bool chunked(const GatedDelta2Dims&, const Dense&, GatedDelta2Kernels) { return false; }
int64_t workspace_bytes(const GatedDelta2Dims&, bool) { return 0; }
Tensor workspace(const GatedDelta2Dims&, bool, Device) { return Tensor(); }
#endif

Tensor forward_cuda(const GatedDelta2Dims& d, const Dense& x, Tensor* state_out, Tensor* kept_scratch,
                    GatedDelta2Kernels kernels) {
  const Device dev = x.q.device();
  const Tensor o = Tensor::empty(x.v.shape(), x.q.dtype(), dev);
  Tensor st = state_out ? Tensor::empty(state_shape(d), DType::F32, dev) : Tensor();
  if (chunked(d, x, kernels)) {
    const bool keep = kept_scratch != nullptr;
    const Tensor ws = workspace(d, keep, dev);
    PRIMER_ON_CUDA(cuda_ops::gated_delta_rule2_chunked_forward(
        cuda_shape(d), x.q.data_ptr(), x.k.data_ptr(), x.v.data_ptr(), x.g.data<float>(), x.b.data<float>(),
        x.w.data<float>(), f32_or_null(x.s), float(d.scale), o.data_ptr(), f32_or_null(&st), ws.data_ptr(), keep));
    if (keep) *kept_scratch = ws;
  } else {
    PRIMER_ON_CUDA(cuda_ops::gated_delta_rule2_forward(
        cuda_shape(d), x.q.dtype(), x.q.data_ptr(), x.k.data_ptr(), x.v.data_ptr(), x.g.data<float>(),
        x.b.data<float>(), x.w.data<float>(), f32_or_null(x.s), float(d.scale), o.data_ptr(), f32_or_null(&st)));
  }
  if (state_out) *state_out = st;
  return o;
}

// The recurrent kernels sum dq, dk, dg and db over the value columns of several CTAs (f32 atomics into zeroed
// tensors); the chunked ones write every gradient whole. dq and dk are then cast to q's dtype.
GatedDelta2Grads backward_cuda(const char* op, const GatedDelta2Dims& d, const Dense& x,
                               [[maybe_unused]] const Tensor& dout, [[maybe_unused]] const Tensor& dstate_out,
                               const Tensor& kept_scratch, GatedDelta2Kernels kernels) {
  const Device dev = x.q.device();
  const DType dt = x.q.dtype();
  const bool whole = chunked(d, x, kernels);
  auto accumulator = [&](const Tensor& like) {
    return whole ? Tensor::empty(like.shape(), DType::F32, dev) : Tensor::zeros(like.shape(), DType::F32, dev);
  };
  GatedDelta2Grads r{accumulator(x.q),
                     accumulator(x.k),
                     Tensor::empty(x.v.shape(), dt, dev),
                     accumulator(x.g),
                     accumulator(x.b),
                     Tensor::empty(x.w.shape(), DType::F32, dev),
                     x.s.defined() ? Tensor::empty(state_shape(d), DType::F32, dev) : Tensor()};
  if (whole) {
    const bool from_forward = kept_scratch.defined();
    PRIMER_CHECK(!from_forward || (!kept_scratch.is_cpu() && kept_scratch.dtype() == DType::U8 &&
                                   kept_scratch.numel() == workspace_bytes(d, true)),
                 "{}: kept_scratch {} is not the scratch of a forward on inputs of these sizes", op,
                 kept_scratch.describe());
    const Tensor ws = from_forward ? kept_scratch : workspace(d, true, dev);
    PRIMER_ON_CUDA(cuda_ops::gated_delta_rule2_chunked_backward(
        cuda_shape(d), dout.data_ptr(), f32_or_null(dstate_out), x.q.data_ptr(), x.k.data_ptr(), x.v.data_ptr(),
        x.g.data<float>(), x.b.data<float>(), x.w.data<float>(), f32_or_null(x.s), float(d.scale), r.dq.data<float>(),
        r.dk.data<float>(), r.dv.data_ptr(), r.dg.data<float>(), r.db.data<float>(), r.dw.data<float>(),
        f32_or_null(&r.dstate_in), ws.data_ptr(), from_forward));
  } else {
    [[maybe_unused]] const Tensor scratch =
        Tensor::empty({cuda_ops::gated_delta_rule2_scratch_floats(cuda_shape(d))}, DType::F32, dev);
    PRIMER_ON_CUDA(cuda_ops::gated_delta_rule2_backward(
        cuda_shape(d), dt, dout.data_ptr(), f32_or_null(dstate_out), x.q.data_ptr(), x.k.data_ptr(), x.v.data_ptr(),
        x.g.data<float>(), x.b.data<float>(), x.w.data<float>(), f32_or_null(x.s), float(d.scale), r.dq.data<float>(),
        r.dk.data<float>(), r.dv.data_ptr(), r.dg.data<float>(), r.db.data<float>(), r.dw.data<float>(),
        f32_or_null(&r.dstate_in), scratch.data<float>()));
  }
  if (dt != DType::F32) {
    r.dq = r.dq.to(dt);
    r.dk = r.dk.to(dt);
  }
  return r;
}

}  // namespace

DType gated_delta_rule2_token_dtype([[maybe_unused]] Device device, [[maybe_unused]] DType activations,
                                    [[maybe_unused]] int64_t key_dim, [[maybe_unused]] int64_t value_dim, DType gates) {
#ifdef PRIMER_WITH_CUDA
  if (!device.is_cpu() && cuda_ops::gated_delta_rule2_chunked_supports({1, 1, 1, key_dim, value_dim}, activations))
    return activations;
#endif
  return gates;
}

Tensor gated_delta_rule2(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& b,
                         const Tensor& w, double scale, const Tensor& state_in, Tensor* state_out, Tensor* kept_scratch,
                         GatedDelta2Kernels kernels) {
  constexpr const char* op = "gated_delta_rule2";
  if (kept_scratch) *kept_scratch = Tensor();
  if (q.defined() && !q.is_cpu()) {
    const GatedDelta2Dims d = check_inputs(op, q, k, v, g, b, w, scale, state_in);
    return forward_cuda(d, Dense(q, k, v, g, b, w, state_in), state_out, kept_scratch, kernels);
  }
  return forward(op, false, q, k, v, g, b, w, scale, state_in, state_out,
                 [&](const GatedDelta2Dims& d, const Dense& x, const Tensor& o, const Tensor& st) {
                   dispatch_cpu_float(q.dtype(), op, [&](auto tag) {
                     using T = decltype(tag);
                     cpu::gated_delta_rule2_chunked<T>(d, x.q.data<T>(), x.k.data<T>(), x.v.data<T>(), x.g.data<T>(),
                                                       x.b.data<T>(), x.w.data<T>(), ptr<T>(x.s), o.data<T>(),
                                                       ptr<T>(st));
                   });
                 });
}

GatedDelta2Grads gated_delta_rule2_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& g, const Tensor& b, const Tensor& w, double scale,
                                            const Tensor& state_in, const Tensor& dstate_out,
                                            const Tensor& kept_scratch, GatedDelta2Kernels kernels) {
  constexpr const char* op = "gated_delta_rule2_backward";
  if (q.defined() && !q.is_cpu()) {
    const GatedDelta2Dims d = check_inputs(op, q, k, v, g, b, w, scale, state_in);
    check_output_grads(op, d, dout, dstate_out, q, v);
    return backward_cuda(op, d, Dense(q, k, v, g, b, w, state_in), dout.contiguous(), contiguous_or_null(dstate_out),
                         kept_scratch, kernels);
  }
  return backward(
      op, false, dout, q, k, v, g, b, w, scale, state_in, dstate_out,
      [&](const GatedDelta2Dims& d, const Dense& x, const Tensor& dy, const Tensor& ds, GatedDelta2Grads& r) {
        dispatch_cpu_float(q.dtype(), op, [&](auto tag) {
          using T = decltype(tag);
          cpu::gated_delta_rule2_chunked_backward<T>(
              d, dy.data<T>(), x.q.data<T>(), x.k.data<T>(), x.v.data<T>(), x.g.data<T>(), x.b.data<T>(), x.w.data<T>(),
              ptr<T>(x.s), ptr<T>(ds), r.dq.data<T>(), r.dk.data<T>(), r.dv.data<T>(), r.dg.data<T>(), r.db.data<T>(),
              r.dw.data<T>(), ptr<T>(r.dstate_in));
        });
      });
}

namespace reference {

Tensor gated_delta_rule2(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& b,
                         const Tensor& w, double scale, const Tensor& state_in, Tensor* state_out) {
  return forward("reference::gated_delta_rule2", true, q, k, v, g, b, w, scale, state_in, state_out,
                 [](const GatedDelta2Dims& d, const Dense& x, const Tensor& o, const Tensor& st) {
                   cpu::gated_delta_rule2_reference(d, x.q.data<double>(), x.k.data<double>(), x.v.data<double>(),
                                                    x.g.data<double>(), x.b.data<double>(), x.w.data<double>(),
                                                    ptr<double>(x.s), o.data<double>(), ptr<double>(st));
                 });
}

GatedDelta2Grads gated_delta_rule2_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& g, const Tensor& b, const Tensor& w, double scale,
                                            const Tensor& state_in, const Tensor& dstate_out) {
  return backward(
      "reference::gated_delta_rule2_backward", true, dout, q, k, v, g, b, w, scale, state_in, dstate_out,
      [](const GatedDelta2Dims& d, const Dense& x, const Tensor& dy, const Tensor& ds, GatedDelta2Grads& r) {
        cpu::gated_delta_rule2_reference_backward(
            d, dy.data<double>(), x.q.data<double>(), x.k.data<double>(), x.v.data<double>(), x.g.data<double>(),
            x.b.data<double>(), x.w.data<double>(), ptr<double>(x.s), ptr<double>(ds), r.dq.data<double>(),
            r.dk.data<double>(), r.dv.data<double>(), r.dg.data<double>(), r.db.data<double>(), r.dw.data<double>(),
            ptr<double>(r.dstate_in));
      });
}

}  // namespace reference
}  // namespace primer::ops
