#include "core/ops/elementwise.h"

#include <algorithm>
#include <vector>

#include "core/ops/cpu/elementwise.h"
#include "core/ops/cuda/elementwise.h"
#include "core/ops/reduce.h"
#include "core/ops/dispatch.h"

namespace primer::ops {
namespace {

Shape broadcast_shape(const char* op, const Tensor& a, const Tensor& b) {
  const int nd = std::max(a.dim(), b.dim());
  Shape out(size_t(nd), 1);
  for (int i = 0; i < nd; ++i) {
    const int ia = i - (nd - a.dim()), ib = i - (nd - b.dim());
    const int64_t sa = ia >= 0 ? a.shape()[ia] : 1, sb = ib >= 0 ? b.shape()[ib] : 1;
    PRIMER_CHECK(sa == sb || sa == 1 || sb == 1, "{}: shapes of 'a' {} and 'b' {} do not broadcast (dim {}: {} vs {})",
                 op, a.describe(), b.describe(), i, sa, sb);
    out[size_t(i)] = sa == 1 ? sb : sa;
  }
  return out;
}

// t laid out over `out` (t's dims aligned to the trailing dims of out): stride 0 where t is stretched.
StridedDesc broadcast_desc(const Tensor& t, const Shape& out) {
  StridedDesc d = strided_desc(t);
  const int nd = int(out.size()), lead = nd - t.dim();
  d.ndim = nd;
  for (int i = nd - 1; i >= 0; --i) {
    const int j = i - lead;
    d.shape[i] = out[size_t(i)];
    d.strides[i] = (j >= 0 && t.shape()[j] == out[size_t(i)]) ? t.strides()[j] : 0;
  }
  return d;
}

// Drops size-1 dims and merges neighbouring dims that are contiguous with each other in every layout, so kernels
// walk as few dims as possible (a same-shape dense pair becomes one dim of stride 1).
void collapse_dims(std::initializer_list<StridedDesc*> layouts) {
  const StridedDesc& first = **layouts.begin();
  std::vector<int> kept;
  std::vector<StridedDesc> merged(layouts.size());
  for (size_t k = 0; k < layouts.size(); ++k) merged[k] = *layouts.begin()[k];
  for (int i = 0; i < first.ndim; ++i) {
    if (first.shape[i] == 1) continue;
    if (!kept.empty()) {
      const int o = kept.back();
      bool mergeable = true;
      for (const StridedDesc& d : merged) mergeable &= d.strides[o] == d.strides[i] * d.shape[i];
      if (mergeable) {
        for (StridedDesc& d : merged) {
          d.shape[o] *= d.shape[i];
          d.strides[o] = d.strides[i];
        }
        continue;
      }
    }
    kept.push_back(i);
  }
  size_t k = 0;
  for (StridedDesc* d : layouts) {
    const StridedDesc& m = merged[k++];
    d->ndim = std::max<int>(int(kept.size()), 1);
    d->shape[0] = 1;
    d->strides[0] = 1;
    for (size_t j = 0; j < kept.size(); ++j) {
      d->shape[j] = m.shape[kept[j]];
      d->strides[j] = m.strides[kept[j]];
    }
    d->contiguous = d->ndim == 1 && d->strides[0] == 1;
  }
}

Tensor binary_op(Binary op, const char* name, const Tensor& a, const Tensor& b) {
  expect_float(a, name, "a", a.device());
  expect(b, name, "b", a.device(), {a.dtype()});
  const Shape shape = broadcast_shape(name, a, b);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  StridedDesc o = strided_desc(out), da = broadcast_desc(a, shape), db = broadcast_desc(b, shape);
  PRIMER_CHECK(o.ndim <= kMaxDims, "{}: more than {} dims", name, kMaxDims);
  collapse_dims({&o, &da, &db});
  if (out.is_cpu())
    cpu::binary(op, o, da, db);
  else
    PRIMER_ON_CUDA(cuda_ops::binary(op, o, da, db));
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(Binary::Add, "add", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(Binary::Sub, "sub", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(Binary::Mul, "mul", a, b); }

Tensor add(const Tensor& a, const Tensor& b, DType out_dtype) {
  if (out_dtype == a.dtype()) return add(a, b);
  expect_float(a, "add", "a", a.device());
  expect(b, "add", "b", a.device(), {a.dtype()});
  expect_shape(b, "add", "b", a.shape());
  if (a.is_cpu()) return add(a, b).to(out_dtype);
  PRIMER_CHECK(out_dtype == DType::F32 || out_dtype == DType::BF16 || out_dtype == DType::F16,
               "add: the output dtype {} on CUDA: expected f32, bf16 or f16", dtype_name(out_dtype));
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = Tensor::empty(a.shape(), out_dtype, a.device());
  if (out.numel() > 0)
    PRIMER_ON_CUDA(cuda_ops::add_dense(out.data_ptr(), out_dtype, ac.data_ptr(), bc.data_ptr(), a.dtype(), a.numel()));
  return out;
}

Tensor scale(const Tensor& a, double s) {
  expect_float(a, "scale", "a", a.device());
  const Tensor x = a.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  if (x.is_cpu())
    cpu::scale(out.data_ptr(), x.data_ptr(), x.numel(), x.dtype(), s);
  else
    PRIMER_ON_CUDA(cuda_ops::scale(out.data_ptr(), x.data_ptr(), x.numel(), x.dtype(), s));
  return out;
}

void add_(const Tensor& dst, const Tensor& src, double alpha) {
  expect_float(dst, "add_", "dst", dst.device());
  if (dst.is_cpu())
    expect(src, "add_", "src", dst.device(), {dst.dtype()});
  else
    expect_float(src, "add_", "src", dst.device());
  expect_shape(src, "add_", "src", dst.shape());
  PRIMER_CHECK(dst.is_contiguous(), "add_: argument 'dst' {} must be contiguous (it is updated in place)",
               dst.describe());
  if (dst.numel() == 0) return;
  const Tensor s = src.contiguous();
  if (dst.is_cpu())
    cpu::add_inplace(dst.data_ptr(), dst.dtype(), s.data_ptr(), s.dtype(), dst.numel(), alpha);
  else
    PRIMER_ON_CUDA(cuda_ops::add_inplace(dst.data_ptr(), dst.dtype(), s.data_ptr(), s.dtype(), dst.numel(), alpha));
}

Tensor unary(Unary op, const Tensor& x) {
  expect_float(x, "unary", "x", x.device());
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (y.numel() == 0) return y;
  if (x.is_cpu())
    cpu::unary(op, y.data_ptr(), xc.data_ptr(), y.numel(), y.dtype());
  else
    PRIMER_ON_CUDA(cuda_ops::unary(op, y.data_ptr(), xc.data_ptr(), y.numel(), y.dtype()));
  return y;
}

Tensor unary_backward(Unary op, const Tensor& x, const Tensor& dy) {
  expect_float(x, "unary_backward", "x", x.device());
  expect(dy, "unary_backward", "dy", x.device(), {x.dtype()});
  expect_shape(dy, "unary_backward", "dy", x.shape());
  const Tensor xc = x.contiguous(), dyc = dy.contiguous();
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (dx.numel() == 0) return dx;
  if (x.is_cpu())
    cpu::unary_backward(op, dx.data_ptr(), xc.data_ptr(), dyc.data_ptr(), dx.numel(), dx.dtype());
  else
    PRIMER_ON_CUDA(cuda_ops::unary_backward(op, dx.data_ptr(), xc.data_ptr(), dyc.data_ptr(), dx.numel(), dx.dtype()));
  return dx;
}

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  PRIMER_CHECK(g.defined(), "sum_to_shape: argument 'g' is undefined");
  const int lead = g.dim() - int(shape.size());
  PRIMER_CHECK(lead >= 0, "sum_to_shape: target shape {} has more dims than 'g' {}", shape_str(shape), g.describe());
  // Group g's dims into runs that are all summed or all kept; a contiguous g views as one dim per run.
  Shape runs;
  std::vector<bool> summed;
  for (int i = 0; i < g.dim(); ++i) {
    const int64_t target = i < lead ? 1 : shape[size_t(i - lead)];
    PRIMER_CHECK(target == g.shape()[i] || target == 1,
                 "sum_to_shape: target shape {} does not broadcast to 'g' {} (dim {}: {} vs {})", shape_str(shape),
                 g.describe(), i, target, g.shape()[i]);
    const bool sums = target == 1 && g.shape()[i] != 1;
    if (!runs.empty() && summed.back() == sums) {
      runs.back() *= g.shape()[i];
    } else {
      runs.push_back(g.shape()[i]);
      summed.push_back(sums);
    }
  }
  if (std::find(summed.begin(), summed.end(), true) == summed.end()) return g.clone().view(shape);
  Tensor r = g.contiguous().view(runs);
  for (int i = int(runs.size()) - 1; i >= 0; --i)
    if (summed[size_t(i)]) r = sum(r, i, /*keepdim=*/true);
  return r.view(shape);
}

}  // namespace primer::ops
