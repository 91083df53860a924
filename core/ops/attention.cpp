#include "core/ops/attention.h"

#include <cmath>

#include "core/ops/cast.h"
#include "core/ops/cpu/attention.h"
#include "core/ops/cuda/attention.h"
#include "core/ops/dispatch.h"

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

}  // namespace primer::ops
