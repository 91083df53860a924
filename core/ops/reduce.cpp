#include "core/ops/reduce.h"

#include "core/ops/cpu/reduce.h"
#include "core/ops/cuda/reduce.h"
#include "core/ops/dispatch.h"

namespace primer::ops {
namespace {

Tensor reduce_dim(const char* op, const Tensor& x, int dim, bool keepdim, bool average) {
  expect_float(x, op, "x", x.device());
  PRIMER_CHECK(x.dim() > 0 && dim >= -x.dim() && dim < x.dim(), "{}: dim {} out of range for argument 'x' {}", op, dim,
               x.describe());
  const int d = dim < 0 ? dim + x.dim() : dim;
  // A dense x is [outer, r, inner] around the reduced dim.
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= x.shape()[i];
  for (int i = d + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  const int64_t r = x.shape()[d];
  Shape shape = x.shape();
  if (keepdim)
    shape[d] = 1;
  else
    shape.erase(shape.begin() + d);
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  if (r == 0) {
    out.zero_();
    return out;
  }
  const Tensor xc = x.contiguous();
  const double multiplier = average ? 1.0 / double(r) : 1.0;
  if (x.is_cpu())
    cpu::sum_dim(out.data_ptr(), xc.data_ptr(), x.dtype(), outer, r, inner, multiplier);
  else
    PRIMER_ON_CUDA(cuda_ops::sum_dim(out.data_ptr(), xc.data_ptr(), x.dtype(), outer, r, inner, multiplier));
  return out;
}

Tensor reduce_all(const char* op, const Tensor& x, bool squares) {
  expect_float(x, op, "x", x.device());
  Tensor out = Tensor::empty({1}, x.dtype() == DType::F64 ? DType::F64 : DType::F32, x.device());
  if (x.numel() == 0) {
    out.zero_();
    return out;
  }
  const Tensor xc = x.contiguous();
  if (x.is_cpu())
    cpu::sum_all(out.data_ptr(), xc.data_ptr(), x.dtype(), x.numel(), squares);
  else
    PRIMER_ON_CUDA(cuda_ops::sum_all(out.data_ptr(), xc.data_ptr(), x.dtype(), x.numel(), squares));
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, int dim, bool keepdim) { return reduce_dim("sum", x, dim, keepdim, false); }
Tensor mean(const Tensor& x, int dim, bool keepdim) { return reduce_dim("mean", x, dim, keepdim, true); }
Tensor sum_all(const Tensor& x) { return reduce_all("sum_all", x, false); }
Tensor sumsq_all(const Tensor& x) { return reduce_all("sumsq_all", x, true); }

}  // namespace primer::ops
