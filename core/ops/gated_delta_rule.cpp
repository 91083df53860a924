#include "core/ops/gated_delta_rule.h"

#include <cmath>

#include "core/ops/cast.h"
#include "core/ops/cpu/gated_delta_rule.h"
#include "core/ops/cuda/gated_delta_rule.h"
#include "core/ops/dispatch.h"
#include "core/ops/key_norm_scale.h"
#include "core/ops/repeat_interleave.h"

namespace primer::ops {
namespace {

// The dtype of the states and of g, beta: the inputs' own on the CPU, f32 on CUDA.
DType state_dtype(const Tensor& q) { return q.is_cpu() ? q.dtype() : DType::F32; }

// Validates the forward's arguments (shared by the backward) and returns the sizes.
GatedDeltaDims check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                            const Tensor& beta, double scale, const Tensor& state_in) {
  PRIMER_CHECK(q.defined() && q.dim() == 4, "{}: argument 'q' is {}, expected [B, T, H, K]", op,
               q.defined() ? q.describe() : "undefined");
  expect_float(q, op, "q", q.device());
  expect(k, op, "k", q.device(), {q.dtype()});
  expect(v, op, "v", q.device(), {q.dtype()});
  const DType sd = state_dtype(q);
  expect(g, op, "g", q.device(), {sd});
  expect(beta, op, "beta", q.device(), {sd});
  PRIMER_CHECK(k.dim() == 4 && k.size(0) == q.size(0) && k.size(1) == q.size(1) && k.size(3) == q.size(3) &&
                   k.size(2) > 0 && q.size(2) % k.size(2) == 0,
               "{}: argument 'k' is {}, expected [B, T, Hk, K] with [B, T] = [{}, {}] and K = {} as q, and Hk "
               "dividing q's {} heads",
               op, k.describe(), q.size(0), q.size(1), q.size(3), q.size(2));
  PRIMER_CHECK(v.dim() == 4 && v.size(0) == q.size(0) && v.size(1) == q.size(1) && v.size(2) == k.size(2),
               "{}: argument 'v' is {}, expected [B, T, Hk, V] with [B, T, Hk] = [{}, {}, {}] as k", op, v.describe(),
               k.size(0), k.size(1), k.size(2));
  const GatedDeltaDims d{q.size(0), q.size(1), q.size(2), q.size(3), v.size(3), scale, k.size(2)};
  expect_shape(g, op, "g", {d.batch, d.time, d.heads});
  expect_shape(beta, op, "beta", {d.batch, d.time, d.heads});
  PRIMER_CHECK(d.key_dim > 0 && d.value_dim > 0, "{}: q is {} and v {}, expected non-empty head dims", op, q.describe(),
               v.describe());
  if (q.is_cuda())
    PRIMER_CHECK(d.key_dim == d.value_dim && (d.key_dim == 64 || d.key_dim == 128),
                 "{}: q is {} and v {}; the CUDA path supports head dims K = V in {{64, 128}}", op, q.describe(),
                 v.describe());
  PRIMER_CHECK(std::isfinite(scale), "{}: scale is {}, expected a finite number", op, scale);
  if (state_in.defined()) {
    expect(state_in, op, "state_in", q.device(), {sd});
    expect_shape(state_in, op, "state_in", {d.batch, d.heads, d.key_dim, d.value_dim});
  }
  return d;
}

Shape state_shape(const GatedDeltaDims& d) { return {d.batch, d.heads, d.key_dim, d.value_dim}; }
Shape output_shape(const GatedDeltaDims& d) { return {d.batch, d.time, d.heads, d.value_dim}; }

// Grouped keys or values [B, T, Hk, ·] repeated to every head [B, T, H, ·], for the paths that take one per head (the
// CPU's and the reference); and per-head gradients [B, T, H, ·] summed over each group: [B, T, Hk, ·].
Tensor every_head(const Tensor& t, int64_t heads) { return repeat_interleave(t, 2, heads / t.size(2)); }
Tensor summed_over_groups(const Tensor& t, int64_t kv_heads) { return sum_repeats(t, 2, t.size(2) / kv_heads); }
Tensor contiguous_or_null(const Tensor& t) { return t.defined() ? t.contiguous() : Tensor(); }
template <class T> const T* ptr(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
template <class T> T* mut_ptr(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

// The CUDA kernels read and write bf16: f32 q, k, v (and dout) are rounded on the way in, results widened on the
// way out.
[[maybe_unused]] Tensor as_bf16(const Tensor& t) {
  return t.dtype() == DType::BF16 ? t.contiguous() : cast(t, DType::BF16);
}
[[maybe_unused]] Tensor like(const Tensor& bf16_result, DType dtype) {
  return dtype == DType::BF16 ? bf16_result : cast(bf16_result, dtype);
}
#ifdef PRIMER_WITH_CUDA
int64_t workspace_bytes(const GatedDeltaDims& d, bool backward, bool raw_keys) {
  return int64_t(cuda_ops::gated_delta_rule_workspace_bytes(d, backward, raw_keys));
}
Tensor workspace(const GatedDeltaDims& d, bool backward, bool raw_keys, Device device) {
  return Tensor::empty({workspace_bytes(d, backward, raw_keys)}, DType::U8, device);
}
#endif

}  // namespace

Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        double scale, const Tensor& state_in, Tensor* state_out, Tensor* kept_scratch,
                        double raw_key_eps) {
  constexpr const char* op = "gated_delta_rule";
  if (kept_scratch) *kept_scratch = Tensor();
  const GatedDeltaDims d = check_inputs(op, q, k, v, g, beta, scale, state_in);
  const bool raw_keys = raw_key_eps >= 0;
  const Tensor gc = g.contiguous(), bc = beta.contiguous(), sc = contiguous_or_null(state_in);
  Tensor st = state_out ? Tensor::empty(state_shape(d), state_dtype(q), q.device()) : Tensor();
  Tensor o;
  if (q.is_cpu()) {
    const KeyNormScaled scaled = raw_keys ? key_norm_scale(k, v, raw_key_eps) : KeyNormScaled{k, v, Tensor()};
    const Tensor qc = q.contiguous(), kc = every_head(scaled.k, d.heads).contiguous(),
                 vc = every_head(scaled.v, d.heads).contiguous();
    o = Tensor::empty(output_shape(d), v.dtype(), v.device());
    dispatch_cpu_float(q.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      cpu::gated_delta_rule_chunked<T>(d, qc.data<T>(), kc.data<T>(), vc.data<T>(), gc.data<T>(), bc.data<T>(),
                                       ptr<T>(sc), o.data<T>(), mut_ptr<T>(st));
    });
  } else {
    PRIMER_ON_CUDA([&] {
      const Tensor qb = as_bf16(q), kb = as_bf16(k), vb = as_bf16(v);
      const Tensor ob = Tensor::empty(output_shape(d), DType::BF16, v.device());
      const bool keep = kept_scratch != nullptr;
      const Tensor ws = workspace(d, keep, raw_keys, q.device());
      cuda_ops::GatedDeltaConfig config;
      config.keep_scratch = keep;
      config.raw_key_eps = raw_keys ? float(raw_key_eps) : -1.f;
      cuda_ops::gated_delta_rule_forward(d, qb.data_ptr(), kb.data_ptr(), vb.data_ptr(), gc.data<float>(),
                                         bc.data<float>(), ptr<float>(sc), ob.data_ptr(), mut_ptr<float>(st),
                                         ws.data_ptr(), config);
      if (keep) *kept_scratch = ws;
      o = like(ob, v.dtype());
    }());
  }
  if (state_out) *state_out = st;
  return o;
}

GatedDeltaGrads gated_delta_rule_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& g, const Tensor& beta, double scale, const Tensor& state_in,
                                          const Tensor& dstate_out, [[maybe_unused]] const Tensor& kept_scratch,
                                          double raw_key_eps) {
  constexpr const char* op = "gated_delta_rule_backward";
  const GatedDeltaDims d = check_inputs(op, q, k, v, g, beta, scale, state_in);
  expect(dout, op, "dout", q.device(), {v.dtype()});
  expect_shape(dout, op, "dout", output_shape(d));
  if (dstate_out.defined()) {
    expect(dstate_out, op, "dstate_out", q.device(), {state_dtype(q)});
    expect_shape(dstate_out, op, "dstate_out", state_shape(d));
  }
  const Tensor gc = g.contiguous(), bc = beta.contiguous(), sc = contiguous_or_null(state_in),
               dsc = contiguous_or_null(dstate_out);
  GatedDeltaGrads r;
  r.dg = Tensor::empty(g.shape(), g.dtype(), g.device());
  r.dbeta = Tensor::empty(beta.shape(), beta.dtype(), beta.device());
  if (state_in.defined()) r.dstate_in = Tensor::empty(state_shape(d), state_in.dtype(), q.device());
  const bool raw_keys = raw_key_eps >= 0;
  if (q.is_cpu()) {
    // Raw keys: the chunked backward on k̂, v̂, then key_norm_scale's backward to the raw k, v.
    const KeyNormScaled scaled = raw_keys ? key_norm_scale(k, v, raw_key_eps) : KeyNormScaled{k, v, Tensor()};
    const Tensor qc = q.contiguous(), kc = every_head(scaled.k, d.heads).contiguous(),
                 vc = every_head(scaled.v, d.heads).contiguous(), doc = dout.contiguous();
    r.dq = Tensor::empty(q.shape(), q.dtype(), q.device());
    r.dk = Tensor::empty(q.shape(), k.dtype(), k.device());
    r.dv = Tensor::empty(output_shape(d), v.dtype(), v.device());
    dispatch_cpu_float(q.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      cpu::gated_delta_rule_chunked_backward<T>(d, doc.data<T>(), qc.data<T>(), kc.data<T>(), vc.data<T>(),
                                                gc.data<T>(), bc.data<T>(), ptr<T>(sc), ptr<T>(dsc), r.dq.data<T>(),
                                                r.dk.data<T>(), r.dv.data<T>(), r.dg.data<T>(), r.dbeta.data<T>(),
                                                mut_ptr<T>(r.dstate_in));
    });
    r.dk = summed_over_groups(r.dk, k.size(2));
    r.dv = summed_over_groups(r.dv, v.size(2));
    if (raw_keys) {
      const KeyNormScaleGrads raw = key_norm_scale_backward(r.dk, r.dv, k, v, scaled.r);
      r.dk = raw.dk;
      r.dv = raw.dv;
    }
  } else {
    PRIMER_ON_CUDA([&] {
      const Tensor qb = as_bf16(q), kb = as_bf16(k), vb = as_bf16(v), dob = as_bf16(dout);
      const Tensor dq = Tensor::empty(q.shape(), DType::BF16, q.device());
      const Tensor dk = Tensor::empty(q.shape(), DType::BF16, k.device());  // every head's: summed over groups below
      const Tensor dv = Tensor::empty(output_shape(d), DType::BF16, v.device());
      cuda_ops::GatedDeltaConfig config;
      config.scratch_from_forward = kept_scratch.defined();
      config.raw_key_eps = raw_keys ? float(raw_key_eps) : -1.f;
      if (config.scratch_from_forward)
        PRIMER_CHECK(kept_scratch.is_cuda() && kept_scratch.dtype() == DType::U8 &&
                         kept_scratch.numel() == workspace_bytes(d, true, raw_keys),
                     "{}: kept_scratch {} is not the scratch of a forward on inputs of these sizes{}", op,
                     kept_scratch.describe(), raw_keys ? " with raw keys" : "");
      const Tensor ws = config.scratch_from_forward ? kept_scratch : workspace(d, true, raw_keys, q.device());
      cuda_ops::gated_delta_rule_backward(d, dob.data_ptr(), qb.data_ptr(), kb.data_ptr(), vb.data_ptr(),
                                          gc.data<float>(), bc.data<float>(), ptr<float>(sc), ptr<float>(dsc),
                                          dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), r.dg.data<float>(),
                                          r.dbeta.data<float>(), mut_ptr<float>(r.dstate_in), ws.data_ptr(), config);
      r.dq = like(dq, q.dtype());
      r.dk = like(summed_over_groups(dk, k.size(2)), k.dtype());
      r.dv = like(summed_over_groups(dv, v.size(2)), v.dtype());
    }());
  }
  return r;
}

namespace reference {

namespace {
void expect_f64_cpu(const char* op, const Tensor& q) {
  PRIMER_CHECK(q.is_cpu() && q.dtype() == DType::F64, "{}: the reference computes in f64 on the CPU, got q {}", op,
               q.describe());
}
}  // namespace

Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        double scale, const Tensor& state_in, Tensor* state_out) {
  constexpr const char* op = "reference::gated_delta_rule";
  const GatedDeltaDims d = check_inputs(op, q, k, v, g, beta, scale, state_in);
  expect_f64_cpu(op, q);
  const Tensor qc = q.contiguous(), kc = every_head(k, d.heads).contiguous(), vc = every_head(v, d.heads).contiguous(),
               gc = g.contiguous(), bc = beta.contiguous(), sc = contiguous_or_null(state_in);
  Tensor o = Tensor::empty(output_shape(d), DType::F64);
  Tensor st = state_out ? Tensor::empty(state_shape(d), DType::F64) : Tensor();
  cpu::gated_delta_rule_reference(d, qc.data<double>(), kc.data<double>(), vc.data<double>(), gc.data<double>(),
                                  bc.data<double>(), ptr<double>(sc), o.data<double>(), mut_ptr<double>(st));
  if (state_out) *state_out = st;
  return o;
}

GatedDeltaGrads gated_delta_rule_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& g, const Tensor& beta, double scale, const Tensor& state_in,
                                          const Tensor& dstate_out) {
  constexpr const char* op = "reference::gated_delta_rule_backward";
  const GatedDeltaDims d = check_inputs(op, q, k, v, g, beta, scale, state_in);
  expect_f64_cpu(op, q);
  expect(dout, op, "dout", q.device(), {DType::F64});
  expect_shape(dout, op, "dout", output_shape(d));
  if (dstate_out.defined()) {
    expect(dstate_out, op, "dstate_out", q.device(), {DType::F64});
    expect_shape(dstate_out, op, "dstate_out", state_shape(d));
  }
  const Tensor qc = q.contiguous(), kc = every_head(k, d.heads).contiguous(), vc = every_head(v, d.heads).contiguous(),
               gc = g.contiguous(), bc = beta.contiguous(), sc = contiguous_or_null(state_in),
               dsc = contiguous_or_null(dstate_out), doc = dout.contiguous();
  GatedDeltaGrads r;
  r.dq = Tensor::empty(q.shape(), DType::F64);
  r.dk = Tensor::empty(q.shape(), DType::F64);
  r.dv = Tensor::empty(output_shape(d), DType::F64);
  r.dg = Tensor::empty(g.shape(), DType::F64);
  r.dbeta = Tensor::empty(beta.shape(), DType::F64);
  if (state_in.defined()) r.dstate_in = Tensor::empty(state_shape(d), DType::F64);
  cpu::gated_delta_rule_reference_backward(
      d, doc.data<double>(), qc.data<double>(), kc.data<double>(), vc.data<double>(), gc.data<double>(),
      bc.data<double>(), ptr<double>(sc), ptr<double>(dsc), r.dq.data<double>(), r.dk.data<double>(),
      r.dv.data<double>(), r.dg.data<double>(), r.dbeta.data<double>(), mut_ptr<double>(r.dstate_in));
  r.dk = summed_over_groups(r.dk, k.size(2));
  r.dv = summed_over_groups(r.dv, v.size(2));
  return r;
}

}  // namespace reference

}  // namespace primer::ops
