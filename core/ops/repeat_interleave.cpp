#include "core/ops/repeat_interleave.h"

#include "core/check.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"

namespace primer::ops {
namespace {

// x viewed as [outer, n, inner] around `dim`.
struct Around {
  int64_t outer = 1, n = 0, inner = 1;
};
Around around(const char* op, const Tensor& x, int& dim, int64_t repeats) {
  const Shape& s = x.shape();
  if (dim < 0) dim += int(s.size());
  PRIMER_CHECK(dim >= 0 && dim < int(s.size()) && repeats >= 1, "{}: dim {} and repeats {} for {}", op, dim, repeats,
               x.describe());
  Around a;
  for (int d = 0; d < dim; ++d) a.outer *= s[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < s.size(); ++d) a.inner *= s[d];
  a.n = s[size_t(dim)];
  return a;
}

}  // namespace

Tensor repeat_interleave(const Tensor& x, int dim, int64_t repeats) {
  const Around a = around("repeat_interleave", x, dim, repeats);
  if (repeats == 1) return x;
  Shape out = x.shape();
  out[size_t(dim)] *= repeats;
  // [outer, n, 1, inner] · ones [repeats, 1]: each slice written `repeats` times by one broadcast pass.
  const Tensor ones = Tensor::full({repeats, 1}, 1.0, x.dtype(), x.device());
  return mul(x.contiguous().view({a.outer, a.n, 1, a.inner}), ones).view(out);
}

Tensor sum_repeats(const Tensor& y, int dim, int64_t repeats) {
  const Around a = around("sum_repeats", y, dim, repeats);
  PRIMER_CHECK(a.n % repeats == 0, "sum_repeats: dim {} of {} is not a multiple of {} repeats", dim, y.describe(),
               repeats);
  if (repeats == 1) return y;
  Shape out = y.shape();
  out[size_t(dim)] /= repeats;
  return sum(y.contiguous().view({a.outer, a.n / repeats, repeats, a.inner}), 2).view(out);
}

}  // namespace primer::ops
