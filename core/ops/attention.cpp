#include "core/ops/attention.h"

#include <cmath>
#include <utility>

#include "core/ops/cast.h"
#include "core/ops/cpu/attention.h"
#include "core/ops/cuda/attention.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/lse_merge.h"

namespace primer::ops {
namespace {

// Validates q, k, v and the options; returns the options with the scale resolved.
AttentionOptions check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                              const AttentionOptions& opt) {
  PRIMER_CHECK(q.defined(), "{}: argument 'q' is undefined", op);
  if (q.is_cpu())
    expect(q, op, "q", q.device(), {DType::F32, DType::F64});
  else
    expect(q, op, "q", q.device(), {DType::BF16});
  expect(k, op, "k", q.device(), {q.dtype()});
  expect(v, op, "v", q.device(), {q.dtype()});
  PRIMER_CHECK(q.dim() == 4, "{}: argument 'q' is {}, expected [B, Tq, Hq, Dh]", op, q.describe());
  PRIMER_CHECK(k.dim() == 4, "{}: argument 'k' is {}, expected [B, Tk, Hkv, Dh]", op, k.describe());
  expect_shape(v, op, "v", k.shape());
  PRIMER_CHECK(k.size(0) == q.size(0) && k.size(3) == q.size(3),
               "{}: 'k' is {} and 'q' is {}, expected the same batch size and head_dim", op, k.describe(),
               q.describe());
  PRIMER_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0,
               "{}: 'q' has {} heads and 'k' {}, expected a multiple (GQA)", op, q.size(2), k.size(2));
  PRIMER_CHECK(q.size(3) > 0, "{}: argument 'q' is {}, expected head_dim > 0", op, q.describe());
  if (q.is_cuda())
    PRIMER_CHECK(q.size(3) == 64 || q.size(3) == 128,
                 "{}: argument 'q' is {}, the CUDA path supports head_dim 64 or 128", op, q.describe());
  PRIMER_CHECK(opt.window >= 0, "{}: window is {}, expected >= 0", op, opt.window);
  PRIMER_CHECK(opt.causal || opt.window == 0, "{}: window {} needs causal = true", op, opt.window);
  PRIMER_CHECK(std::isfinite(opt.scale), "{}: scale is {}, expected finite", op, opt.scale);
  AttentionOptions resolved = opt;
  if (resolved.scale == 0) resolved.scale = 1.0 / std::sqrt(double(q.size(3)));
  return resolved;
}

// Statistics are f64 beside the f64 reference so that its backward is exact; f32 otherwise.
DType lse_dtype(const Tensor& q) { return q.dtype() == DType::F64 ? DType::F64 : DType::F32; }

#ifdef PRIMER_WITH_CUDA
cuda_ops::AttentionDims cuda_dims(const Tensor& q, const Tensor& k, const AttentionOptions& o) {
  return {q.size(0),      q.size(1), k.size(1), q.size(2),  k.size(2), q.size(3),
          float(o.scale), o.causal,  o.window,  o.q_offset, o.k_offset};
}
#endif

// Validates two sources against each other; returns their resolved options (f32_dq off: the merged ops return dq in
// q's dtype).
std::pair<AttentionOptions, AttentionOptions> check_sources(const char* op, const AttentionSource& a,
                                                            const AttentionSource& b) {
  const Tensor& qb = b.q.defined() ? b.q : a.q;
  AttentionOptions oa = check_inputs(op, a.q, a.k, a.v, a.options), ob = check_inputs(op, qb, b.k, b.v, b.options);
  PRIMER_CHECK(
      qb.shape() == a.q.shape() && b.k.dtype() == a.k.dtype() && b.k.size(2) == a.k.size(2) && oa.scale == ob.scale,
      "{}: source a has q {} and k {}, source b q {} and k {}, scales {} and {}: expected one query shape, "
      "dtype, key-head count and scale",
      op, a.q.describe(), a.k.describe(), qb.describe(), b.k.describe(), oa.scale, ob.scale);
  oa.f32_dq = ob.f32_dq = false;
  return {oa, ob};
}

// Both sources' tensors made contiguous for the fused kernels (b's queries are a's where it shares them).
struct FusedSources {
  Tensor q[2], k[2], v[2];
  AttentionOptions options[2];
  FusedSources(const AttentionSource& a, const AttentionSource& b, const AttentionOptions& oa,
               const AttentionOptions& ob)
      : q{a.q.contiguous(), b.q.defined() ? b.q.contiguous() : Tensor()},
        k{a.k.contiguous(), b.k.contiguous()},
        v{a.v.contiguous(), b.v.contiguous()},
        options{oa, ob} {
    if (!q[1].defined()) q[1] = q[0];
  }
#ifdef PRIMER_WITH_CUDA
  cuda_ops::AttentionSource kernel_source(int s) const {
    return {q[s].data_ptr(), k[s].data_ptr(), v[s].data_ptr(), cuda_dims(q[s], k[s], options[s])};
  }
#endif
};

// Whether both sources run in one CUDA kernel each way (Hopper), rather than as two attentions and a merge.
bool two_sources_fused(const AttentionSource& a, const AttentionSource& b) {
#ifdef PRIMER_WITH_CUDA
  return a.q.is_cuda() && a.k.size(1) > 0 && b.k.size(1) > 0 && cuda_ops::attention_two_sources_available();
#else
  (void)a, (void)b;
  return false;
#endif
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt, Tensor* lse_out) {
  const AttentionOptions o = check_inputs("attention", q, k, v, opt);
  const Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor lse = Tensor::empty({q.size(0), q.size(2), q.size(1)}, lse_dtype(q), q.device());
  if (out.numel() > 0) {
    if (q.is_cpu()) {
      cpu::attention_forward(out, lse, qc, kc, vc, o);
    } else {
      PRIMER_ON_CUDA(cuda_ops::attention_forward(out.data_ptr(), lse.data<float>(), qc.data_ptr(), kc.data_ptr(),
                                                 vc.data_ptr(), cuda_dims(qc, kc, o)));
    }
  }
  if (lse_out) *lse_out = lse;
  return out;
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const AttentionOptions& opt, Tensor* dq, Tensor* dk, Tensor* dv) {
  constexpr const char* op = "attention_backward";
  const AttentionOptions o = check_inputs(op, q, k, v, opt);
  expect(dout, op, "dout", q.device(), {q.dtype()});
  expect_shape(dout, op, "dout", q.shape());
  expect(out, op, "out", q.device(), {q.dtype()});
  expect_shape(out, op, "out", q.shape());
  expect(lse, op, "lse", q.device(), {lse_dtype(q)});
  expect_shape(lse, op, "lse", {q.size(0), q.size(2), q.size(1)});
  PRIMER_CHECK(dq && dk && dv, "{}: dq, dk and dv must all be given", op);
  const Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const Tensor dc = dout.contiguous(), oc = out.contiguous(), lc = lse.contiguous();
  Tensor dk_new = Tensor::empty(k.shape(), k.dtype(), k.device());
  Tensor dv_new = Tensor::empty(v.shape(), v.dtype(), v.device());
  if (q.is_cpu()) {
    Tensor dq_new = Tensor::empty(q.shape(), q.dtype(), q.device());
    cpu::attention_backward(dq_new, dk_new, dv_new, dc, qc, kc, vc, oc, lc, o);
    *dq = dq_new;
  } else {
    Tensor dq_accum = Tensor::empty(q.shape(), DType::F32, q.device());
    Tensor delta = Tensor::empty(lse.shape(), DType::F32, q.device());
    if (dk_new.numel() > 0 && dq_accum.numel() > 0) {
      PRIMER_ON_CUDA(cuda_ops::attention_backward(
          dq_accum.data<float>(), dk_new.data_ptr(), dv_new.data_ptr(), delta.data<float>(), dc.data_ptr(),
          qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), oc.data_ptr(), lc.data<float>(), cuda_dims(qc, kc, o)));
    } else {
      dq_accum.zero_();
      dk_new.zero_();
      dv_new.zero_();
    }
    *dq = o.f32_dq ? dq_accum : cast(dq_accum, q.dtype());
  }
  *dk = dk_new;
  *dv = dv_new;
}

Tensor merged_attention(const AttentionSource& a, const AttentionSource& b, Tensor* lse_out) {
  const auto [oa, ob] = check_sources("merged_attention", a, b);
  const Tensor& qb = b.q.defined() ? b.q : a.q;
  if (!two_sources_fused(a, b)) {
    Tensor lse_a, lse_b;
    const Tensor out_a = attention(a.q, a.k, a.v, oa, &lse_a), out_b = attention(qb, b.k, b.v, ob, &lse_b);
    return lse_merge(out_a, lse_a, out_b, lse_b, lse_out);
  }
  const FusedSources fs(a, b, oa, ob);
  const Tensor& q = fs.q[0];
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor lse = Tensor::empty({q.size(0), q.size(2), q.size(1)}, DType::F32, q.device());
  if (out.numel() > 0) {
    PRIMER_ON_CUDA(cuda_ops::attention_forward_two_sources(out.data_ptr(), lse.data<float>(),
                                                           {fs.kernel_source(0), fs.kernel_source(1)}));
  }
  if (lse_out) *lse_out = lse;
  return out;
}

void merged_attention_backward(const Tensor& dout, const AttentionSource& a, const AttentionSource& b,
                               const Tensor& out, const Tensor& lse, AttentionSourceGrads* a_grads,
                               AttentionSourceGrads* b_grads) {
  constexpr const char* op = "merged_attention_backward";
  const auto [oa, ob] = check_sources(op, a, b);
  PRIMER_CHECK(a_grads && b_grads, "{}: both sources' gradients must be given", op);
  const Tensor& qb = b.q.defined() ? b.q : a.q;
  if (!two_sources_fused(a, b)) {
    AttentionSourceGrads& ga = *a_grads;
    AttentionSourceGrads& gb = *b_grads;
    attention_backward(dout, a.q, a.k, a.v, out, lse, oa, &ga.dq, &ga.dk, &ga.dv);
    attention_backward(dout, qb, b.k, b.v, out, lse, ob, &gb.dq, &gb.dk, &gb.dv);
    if (!b.q.defined()) ga.dq = add(ga.dq, gb.dq), gb.dq = Tensor();
    return;
  }
  expect(dout, op, "dout", a.q.device(), {a.q.dtype()});
  expect_shape(dout, op, "dout", a.q.shape());
  expect(out, op, "out", a.q.device(), {a.q.dtype()});
  expect_shape(out, op, "out", a.q.shape());
  expect(lse, op, "lse", a.q.device(), {DType::F32});
  expect_shape(lse, op, "lse", {a.q.size(0), a.q.size(2), a.q.size(1)});
  const FusedSources fs(a, b, oa, ob);
  const Tensor& q = fs.q[0];
  const Tensor dc = dout.contiguous(), oc = out.contiguous(), lc = lse.contiguous();
  const bool shared_queries = !b.q.defined();
  AttentionSourceGrads g[2];
  cuda_ops::AttentionSourceGrads kernel_grads[2]{};
  for (int s = 0; s < 2; ++s) {
    g[s].dq = s == 1 && shared_queries ? g[0].dq : Tensor::empty(q.shape(), DType::F32, q.device());
    g[s].dk = Tensor::empty(fs.k[s].shape(), fs.k[s].dtype(), q.device());
    g[s].dv = Tensor::empty(fs.v[s].shape(), fs.v[s].dtype(), q.device());
    kernel_grads[s] = {g[s].dq.data<float>(), g[s].dk.data_ptr(), g[s].dv.data_ptr()};
  }
  if (q.numel() > 0) {
    Tensor delta = Tensor::empty(lc.shape(), DType::F32, q.device());
    PRIMER_ON_CUDA(cuda_ops::attention_backward_two_sources(kernel_grads, delta.data<float>(), dc.data_ptr(),
                                                            oc.data_ptr(), lc.data<float>(),
                                                            {fs.kernel_source(0), fs.kernel_source(1)}));
  } else {
    for (AttentionSourceGrads& gs : g) gs.dk.zero_(), gs.dv.zero_();
  }
  // dq leaves the kernels as the f32 accumulator; shared queries have one.
  *a_grads = {cast(g[0].dq, q.dtype()), g[0].dk, g[0].dv};
  *b_grads = {shared_queries ? Tensor() : cast(g[1].dq, q.dtype()), g[1].dk, g[1].dv};
}

}  // namespace primer::ops
