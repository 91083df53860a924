#include "core/ops/cast.h"

#include "core/ops/cpu/copy.h"
#include "core/ops/cuda/copy.h"
#include "core/ops/dispatch.h"

namespace primer::ops {

void copy(const Tensor& dst, const Tensor& src) {
  PRIMER_CHECK(dst.shape() == src.shape(), "copy: source {} and destination {} differ in shape", src.describe(),
               dst.describe());
  PRIMER_CHECK(dst.device() == src.device(), "copy: source {} and destination {} are on different devices",
               src.describe(), dst.describe());
  if (dst.numel() == 0) return;
  if (dst.is_cpu()) {
    cpu::copy(strided_desc(dst), strided_desc(src));
  } else {
    PRIMER_ON_CUDA(cuda_ops::copy(strided_desc(dst), strided_desc(src)));
  }
}

Tensor cast(const Tensor& x, DType dtype) {
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  copy(out, x);
  return out;
}

void fill(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  if (dst.is_cpu()) {
    cpu::fill(strided_desc(dst), value);
  } else {
    PRIMER_ON_CUDA(cuda_ops::fill(strided_desc(dst), value));
  }
}

}  // namespace primer::ops
