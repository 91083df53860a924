#include "core/ops/rope.h"

#include <cmath>
#include <vector>

#include "core/ops/cpu/rope.h"
#include "core/ops/cuda/rope.h"
#include "core/ops/dispatch.h"

namespace primer::ops {
namespace {

// Shared by the forward and the backward, which is the same rotation by the opposite angle.
Tensor rotate(const char* op, const char* arg, const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
              bool inverse) {
  expect_float(x, op, arg, x.device());
  PRIMER_CHECK(x.dim() == 4 && x.size(3) % 2 == 0 && x.size(3) > 0,
               "{}: argument '{}' is {}, expected [B, T, H, Dh] with Dh even", op, arg, x.describe());
  expect(positions, op, "positions", x.device(), {DType::I32});
  expect_shape(positions, op, "positions", {x.size(0), x.size(1)});
  expect(inv_freq, op, "inv_freq", x.device(), {DType::F32});
  expect_shape(inv_freq, op, "inv_freq", {x.size(3) / 2});
  const Tensor xc = x.contiguous(), pc = positions.contiguous(), fc = inv_freq.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() > 0) {
    if (x.is_cpu()) {
      cpu::rope(y, xc, pc, fc, inverse);
    } else {
      PRIMER_ON_CUDA(cuda_ops::rope(y.data_ptr(), xc.data_ptr(), pc.data<int32_t>(), fc.data<float>(), pc.numel(),
                                    x.size(2), x.size(3), x.dtype(), inverse));
    }
  }
  return y;
}

}  // namespace

Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  return rotate("rope", "x", x, positions, inv_freq, false);
}

Tensor rope_backward(const Tensor& dy, const Tensor& positions, const Tensor& inv_freq) {
  return rotate("rope_backward", "dy", dy, positions, inv_freq, true);
}

Tensor rope_inv_freq(int64_t head_dim, double theta) {
  PRIMER_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope_inv_freq: head_dim is {}, expected a positive even number",
               head_dim);
  PRIMER_CHECK(theta > 0, "rope_inv_freq: theta is {}, expected > 0", theta);
  std::vector<float> inv_freq(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i)
    inv_freq[size_t(i)] = float(std::pow(theta, -2.0 * double(i) / double(head_dim)));
  return Tensor::from_vector(inv_freq, {head_dim / 2}, DType::F32);
}

}  // namespace primer::ops
