#include "core/ops/swiglu.h"

#include "core/ops/cpu/swiglu.h"
#include "core/ops/cuda/swiglu.h"
#include "core/ops/dispatch.h"

namespace primer::ops {
namespace {

// `t` must match gate in device, dtype and shape.
void expect_like_gate(const Tensor& t, const char* op, const char* arg, const Tensor& gate) {
  expect(t, op, arg, gate.device(), {gate.dtype()});
  expect_shape(t, op, arg, gate.shape());
}

}  // namespace

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  expect_float(gate, "swiglu", "gate", gate.device());
  expect_like_gate(up, "swiglu", "up", gate);
  const Tensor gc = gate.contiguous(), uc = up.contiguous();
  Tensor h = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  if (h.numel() == 0) return h;
  if (gate.is_cpu()) {
    cpu::swiglu(h, gc, uc);
  } else {
    PRIMER_ON_CUDA(cuda_ops::swiglu_forward(h.data_ptr(), gc.data_ptr(), uc.data_ptr(), h.numel(), h.dtype()));
  }
  return h;
}

void swiglu_backward(const Tensor& dh, const Tensor& gate, const Tensor& up, Tensor* dgate, Tensor* dup) {
  constexpr const char* op = "swiglu_backward";
  expect_float(gate, op, "gate", gate.device());
  expect_like_gate(up, op, "up", gate);
  expect_like_gate(dh, op, "dh", gate);
  PRIMER_CHECK(dgate != nullptr && dup != nullptr, "{}: the outputs dgate and dup must both be given", op);
  const Tensor dhc = dh.contiguous(), gc = gate.contiguous(), uc = up.contiguous();
  Tensor dg = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  Tensor du = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  if (dg.numel() > 0) {
    if (gate.is_cpu()) {
      cpu::swiglu_backward(dg, du, dhc, gc, uc);
    } else {
      PRIMER_ON_CUDA(cuda_ops::swiglu_backward(dg.data_ptr(), du.data_ptr(), dhc.data_ptr(), gc.data_ptr(),
                                               uc.data_ptr(), dg.numel(), dg.dtype()));
    }
  }
  *dgate = dg;
  *dup = du;
}

}  // namespace primer::ops
