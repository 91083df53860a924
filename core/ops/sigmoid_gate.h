// A gate squashed from a projection, y = sigmoid(a + bias) + offset, in one pass each way instead of a bias add, a cast
// to the gate's dtype, a sigmoid and an offset (and their backward passes): GKA's β (offset 1e-6) and α, GDN's and
// GDN-2's β.
//   a [..., P] in any float dtype; bias (optional) [P] with a's trailing dim; y like a in f32 (f64 beside f64), the
//   dtype in which the gates scale the heads. f32 math on CUDA, f64 on the CPU.
// Backward, with z = a + bias and s = sigmoid(z): da = dy·s(1 − s) rounded to a's dtype, dbias = Σ_rows da (the
// column sums of the gradient a receives, as an add's backward forms them).
#pragma once
#include "core/tensor.h"

namespace primer::ops {

Tensor sigmoid_gate(const Tensor& a, const Tensor& bias, double offset = 0.0);

struct SigmoidGateGrads {
  Tensor da, dbias;  // like a and bias (dbias undefined without a bias)
};
// dy like y.
SigmoidGateGrads sigmoid_gate_backward(const Tensor& dy, const Tensor& a, const Tensor& bias);

}  // namespace primer::ops
