#include "core/autograd/slicing.h"

#include "core/check.h"

namespace primer::ag {

std::vector<Var> split(const Var& x, int dim, const std::vector<int64_t>& sizes) {
  const Tensor& xv = x->value;
  if (dim < 0) dim += xv.dim();
  PRIMER_CHECK(dim >= 0 && dim < xv.dim(), "split: dim {} is out of range for {}", dim, xv.describe());
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  PRIMER_CHECK(total == xv.size(dim), "split: sizes sum to {}, but {} has {} along dim {}", total, xv.describe(),
               xv.size(dim), dim);
  std::vector<Var> pieces;
  int64_t start = 0;
  for (int64_t s : sizes) {
    pieces.push_back(constant(xv.slice(dim, start, start + s).contiguous()));
    start += s;
  }
  if (needs_grad({&x}))
    record("split", pieces, [x, dim, sizes, pieces] {
      Tensor dx = Tensor::empty(x->value.shape(), x->value.dtype(), x->value.device());
      int64_t at = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        dx.slice(dim, at, at + sizes[i]).copy_from(grad_or_zeros(pieces[i]));
        at += sizes[i];
      }
      accumulate_grad(x, dx);
    });
  return pieces;
}

Var concat(const std::vector<Var>& pieces, int dim) {
  PRIMER_CHECK(!pieces.empty(), "concat: no pieces");
  const Tensor& first = pieces[0]->value;
  if (dim < 0) dim += first.dim();
  PRIMER_CHECK(dim >= 0 && dim < first.dim(), "concat: dim {} is out of range for {}", dim, first.describe());
  Shape shape = first.shape();
  shape[size_t(dim)] = 0;
  for (const Var& p : pieces) {
    Shape expected = first.shape();
    expected[size_t(dim)] = p->value.size(dim);
    PRIMER_CHECK(
        p->value.shape() == expected && p->value.dtype() == first.dtype() && p->value.device() == first.device(),
        "concat: piece {} does not fit {} along dim {}", p->value.describe(), first.describe(), dim);
    shape[size_t(dim)] += p->value.size(dim);
  }
  Var y = constant(Tensor::empty(shape, first.dtype(), first.device()));
  std::vector<int64_t> starts;
  int64_t at = 0;
  for (const Var& p : pieces) {
    starts.push_back(at);
    y->value.slice(dim, at, at + p->value.size(dim)).copy_from(p->value);
    at += p->value.size(dim);
  }
  bool any = false;
  for (const Var& p : pieces) any |= needs_grad({&p});
  if (any)
    record("concat", {y}, [pieces, starts, dim, y] {
      for (size_t i = 0; i < pieces.size(); ++i) {
        const int64_t n = pieces[i]->value.size(dim);
        if (pieces[i]->requires_grad)
          accumulate_grad(pieces[i], y->grad.slice(dim, starts[i], starts[i] + n).contiguous());
      }
    });
  return y;
}

}  // namespace primer::ag
