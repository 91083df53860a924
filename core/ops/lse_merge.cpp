#include "core/ops/lse_merge.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/ops/cuda/lse_merge.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"

namespace primer::ops {
namespace {

void check_parts(const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b, const Tensor& lse_b) {
  PRIMER_CHECK(out_a.dim() == 4 && out_a.shape() == out_b.shape() && out_a.dtype() == out_b.dtype() &&
                   lse_a.shape() == Shape({out_a.size(0), out_a.size(2), out_a.size(1)}) &&
                   lse_b.shape() == lse_a.shape() && lse_a.dtype() == lse_b.dtype() &&
                   (lse_a.dtype() == DType::F32 || lse_a.dtype() == DType::F64),
               "lse_merge: expected out [B, T, H, Dh] twice and lse [B, H, T] (f32/f64) twice, got {}, {}, {}, {}",
               out_a.describe(), lse_a.describe(), out_b.describe(), lse_b.describe());
}

}  // namespace

Tensor lse_merge(const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b, const Tensor& lse_b, Tensor* lse_out) {
  check_parts(out_a, lse_a, out_b, lse_b);
  if (!out_a.is_cpu() && lse_a.dtype() == DType::F32) {  // one fused pass
    const Tensor oa = out_a.contiguous(), ob = out_b.contiguous(), la = lse_a.contiguous(), lb = lse_b.contiguous();
    Tensor out = Tensor::empty(oa.shape(), oa.dtype(), oa.device()),
           lse = Tensor::empty(la.shape(), DType::F32, la.device());
    PRIMER_ON_CUDA(cuda_ops::lse_merge(out.data_ptr(), lse.data<float>(), oa.data_ptr(), la.data<float>(),
                                       ob.data_ptr(), lb.data<float>(), oa.size(0), oa.size(1), oa.size(2), oa.size(3),
                                       oa.dtype()));
    if (lse_out) *lse_out = lse;
    return out;
  }
  const DType acc = lse_a.dtype();
  const Tensor d = sub(lse_b, lse_a);
  // [B, H, T] weights → [B, T, H, 1], broadcast over the head dim.
  auto per_row = [](const Tensor& w) { return w.permute({0, 2, 1}).unsqueeze(3); };
  const Tensor keep = per_row(unary(Unary::Sigmoid, scale(d, -1.0)));
  const Tensor take = per_row(unary(Unary::Sigmoid, d));
  if (lse_out) *lse_out = add(lse_a, unary(Unary::Softplus, d));
  return add(mul(out_a.to(acc), keep), mul(out_b.to(acc), take)).to(out_a.dtype());
}

namespace reference {

Tensor lse_merge(const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b, const Tensor& lse_b, Tensor* lse_out) {
  check_parts(out_a, lse_a, out_b, lse_b);
  const int64_t B = out_a.size(0), T = out_a.size(1), H = out_a.size(2), Dh = out_a.size(3);
  const std::vector<double> oa = out_a.to_vector<double>(), ob = out_b.to_vector<double>();
  const std::vector<double> la = lse_a.to_vector<double>(), lb = lse_b.to_vector<double>();
  std::vector<double> out(oa.size(), 0.0), lse(la.size());
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const size_t r = size_t((b * H + h) * T + t);
        const double m = std::max(la[r], lb[r]);
        if (m == -kInf) {  // no key on either side
          lse[r] = -kInf;
          continue;
        }
        const double wa = std::exp(la[r] - m), wb = std::exp(lb[r] - m), z = wa + wb;
        lse[r] = m + std::log(z);
        for (int64_t i = 0; i < Dh; ++i) {
          const size_t e = size_t(((b * T + t) * H + h) * Dh + i);
          out[e] = (wa * oa[e] + wb * ob[e]) / z;
        }
      }
  if (lse_out) *lse_out = Tensor::from_vector(lse, lse_a.shape(), DType::F64);
  return Tensor::from_vector(out, out_a.shape(), DType::F64);
}

}  // namespace reference
}  // namespace primer::ops
