#include "core/ops/scale_heads.h"

#include "core/ops/cuda/scale_heads.h"
#include "core/ops/dispatch.h"
#include "core/ops/reduce.h"

namespace primer::ops {
namespace {

struct Layout : cuda_ops::ScaleHeadsDims {
  Shape out_shape;  // [..., H, D]
};

// The output's dtype: x's, or f32 from bf16 on CUDA.
void check_out_dtype(const char* op, const Tensor& x, DType out, const char* what) {
  PRIMER_CHECK(out == x.dtype() || (x.is_cuda() && x.dtype() == DType::BF16 && out == DType::F32),
               "{}: {} is {} for x {}: expected x's dtype{}", op, what, dtype_name(out), x.describe(),
               x.is_cuda() && x.dtype() == DType::BF16 ? " or f32" : "");
}

// x [..., Hx, D] in a float dtype; s [..., H] or [H] in accum_dtype(x); heads a multiple of Hx.
Layout check_layout(const char* op, const Tensor& x, const Tensor& s, int64_t heads) {
  expect_float(x, op, "x", x.device());
  expect(s, op, "s", x.device(), {accum_dtype(x.dtype())});
  PRIMER_CHECK(x.dim() >= 2, "{}: x is {}, expected [..., heads, head_dim]", op, x.describe());
  const int64_t x_heads = x.size(-2), head_dim = x.size(-1);
  PRIMER_CHECK(x_heads > 0 && heads >= x_heads && heads % x_heads == 0,
               "{}: {} output heads from x {}: expected a multiple of its {} heads", op, heads, x.describe(), x_heads);
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 2] = heads;
  const Shape rows_shape(x.shape().begin(), x.shape().end() - 2);
  Shape per_row_shape = rows_shape;
  per_row_shape.push_back(heads);
  const bool per_row = s.shape() == per_row_shape;
  PRIMER_CHECK(per_row || s.shape() == Shape{heads},
               "{}: s is {}, expected one value per row and head {} or per head [{}] for x {} and {} heads", op,
               s.describe(), shape_str(per_row_shape), heads, x.describe(), heads);
  Layout l;
  l.rows = shape_numel(rows_shape), l.x_heads = x_heads, l.groups = heads / x_heads, l.head_dim = head_dim;
  l.per_row = per_row, l.out_shape = out_shape;
  return l;
}

template <class T> void forward_cpu(T* out, const T* x, const T* s, const T* base, const Layout& l) {
  const int64_t H = l.x_heads * l.groups, D = l.head_dim;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < l.rows; ++r)
    for (int64_t h = 0; h < H; ++h) {
      const double scale = double(s[l.per_row ? r * H + h : h]);
      const T* xr = x + (r * l.x_heads + h / l.groups) * D;
      const int64_t o = (r * H + h) * D;
      for (int64_t d = 0; d < D; ++d) {
        const double b = base ? double(base[o + d]) : 0.0;
        out[o + d] = T(b + scale * (double(xr[d]) - (l.lerp ? b : 0.0)));
      }
    }
}

template <class T> void backward_cpu(T* dx, T* ds_rows, T* dbase, const T* dout_first, const T* dout_part, const T* x,
                                     const T* s, const T* base, const T* dx_addend, const Layout& l) {
  const int64_t H = l.x_heads * l.groups, D = l.head_dim;
  const auto dout = [&](int64_t i) { return double(dout_first[i]) + (dout_part ? double(dout_part[i]) : 0.0); };
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < l.rows; ++r)
    for (int64_t j = 0; j < l.x_heads; ++j) {
      const T* xr = x + (r * l.x_heads + j) * D;
      for (int64_t d = 0; d < D; ++d) {
        double acc = dx_addend ? double(dx_addend[(r * l.x_heads + j) * D + d]) : 0.0;
        for (int64_t g = 0; g < l.groups; ++g) {
          const int64_t h = j * l.groups + g;
          acc += double(s[l.per_row ? r * H + h : h]) * dout((r * H + h) * D + d);
        }
        dx[(r * l.x_heads + j) * D + d] = T(acc);
      }
      for (int64_t g = 0; g < l.groups; ++g) {
        const int64_t h = j * l.groups + g;
        const int64_t o = (r * H + h) * D;
        const double scale = double(s[l.per_row ? r * H + h : h]);
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) {
          dot += dout(o + d) * (double(xr[d]) - (base ? double(base[o + d]) : 0.0));
          if (dbase) dbase[o + d] = T((1.0 - scale) * dout(o + d));
        }
        ds_rows[r * H + h] = T(dot);
      }
    }
}

}  // namespace

Tensor scale_heads(const Tensor& x, const Tensor& s, const Tensor& base, int64_t heads,
                   const ScaleHeadsOptions& options) {
  constexpr const char* op = "scale_heads";
  Layout l = check_layout(op, x, s, heads);
  const DType out_dtype = options.out_dtype.value_or(x.dtype());
  check_out_dtype(op, x, out_dtype, "the output dtype");
  l.lerp = options.base == HeadBase::Lerp;
  PRIMER_CHECK(base.defined() || !l.lerp, "{}: a mix with the base (HeadBase::Lerp) needs a base", op);
  if (base.defined()) {
    expect(base, op, "base", x.device(), {out_dtype});
    expect_shape(base, op, "base", l.out_shape);
  }
  Tensor* hi = options.bf16_hi_out;
  Tensor* lo = options.bf16_lo_out;
  PRIMER_CHECK(!lo || hi, "{}: bf16_lo_out is given without bf16_hi_out: expected the split's halves together", op);
  PRIMER_CHECK(!hi || (x.is_cuda() && out_dtype == DType::F32),
               "{}: a bf16 split of the output is asked of a {} output on {}: expected an f32 output on CUDA", op,
               dtype_name(out_dtype), x.is_cuda() ? "CUDA" : "the CPU");
  const Tensor xc = x.contiguous(), sc = s.contiguous(), bc = base.defined() ? base.contiguous() : Tensor();
  Tensor out = Tensor::empty(l.out_shape, out_dtype, x.device());
  if (hi) *hi = Tensor::empty(l.out_shape, DType::BF16, x.device());
  if (lo) *lo = Tensor::empty(l.out_shape, DType::BF16, x.device());
  if (x.is_cpu()) {
    dispatch_cpu_float(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      forward_cpu<T>(out.data<T>(), xc.data<T>(), sc.data<T>(), bc.defined() ? bc.data<T>() : nullptr, l);
    });
  } else {
    PRIMER_ON_CUDA(cuda_ops::scale_heads_forward(out.data_ptr(), xc.data_ptr(), sc.data<float>(),
                                                 bc.defined() ? bc.data_ptr() : nullptr, hi ? hi->data_ptr() : nullptr,
                                                 lo ? lo->data_ptr() : nullptr, l, x.dtype(), out_dtype));
  }
  return out;
}

ScaleHeadsGrads scale_heads_backward(const Tensor& dout, const Tensor& x, const Tensor& s, const Tensor& dx_addend,
                                     const Tensor& lerp_base, const Tensor& dout_part) {
  constexpr const char* op = "scale_heads_backward";
  Layout l = check_layout(op, x, s, s.size(-1));
  PRIMER_CHECK(dout.defined(), "{}: dout is undefined", op);
  check_out_dtype(op, x, dout.dtype(), "dout's dtype");
  expect(dout, op, "dout", x.device(), {dout.dtype()});  // on x's device
  expect_shape(dout, op, "dout", l.out_shape);
  l.lerp = lerp_base.defined();
  if (l.lerp) {
    expect(lerp_base, op, "lerp_base", x.device(), {dout.dtype()});
    expect_shape(lerp_base, op, "lerp_base", l.out_shape);
  }
  if (dx_addend.defined()) {
    expect(dx_addend, op, "dx_addend", x.device(), {x.dtype()});
    expect_shape(dx_addend, op, "dx_addend", x.shape());
  }
  if (dout_part.defined()) {
    expect(dout_part, op, "dout_part", x.device(), {dout.dtype()});
    expect_shape(dout_part, op, "dout_part", l.out_shape);
  }
  const Tensor xc = x.contiguous(), sc = s.contiguous(), dc = dout.contiguous();
  const Tensor pc = dout_part.defined() ? dout_part.contiguous() : Tensor();
  const Tensor ac = dx_addend.defined() ? dx_addend.contiguous() : Tensor();
  const Tensor bc = l.lerp ? lerp_base.contiguous() : Tensor();
  const int64_t H = l.x_heads * l.groups;
  ScaleHeadsGrads g{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor(),
                    l.lerp ? Tensor::empty(l.out_shape, dout.dtype(), x.device()) : Tensor()};
  Tensor ds_rows = Tensor::empty({l.rows, H}, s.dtype(), x.device());
  if (x.is_cpu()) {
    dispatch_cpu_float(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      backward_cpu<T>(g.dx.data<T>(), ds_rows.data<T>(), l.lerp ? g.dbase.data<T>() : nullptr, dc.data<T>(),
                      pc.defined() ? pc.data<T>() : nullptr, xc.data<T>(), sc.data<T>(),
                      l.lerp ? bc.data<T>() : nullptr, ac.defined() ? ac.data<T>() : nullptr, l);
    });
  } else {
    PRIMER_ON_CUDA(cuda_ops::scale_heads_backward(
        g.dx.data_ptr(), ds_rows.data<float>(), l.lerp ? g.dbase.data_ptr() : nullptr, dc.data_ptr(),
        pc.defined() ? pc.data_ptr() : nullptr, xc.data_ptr(), sc.data<float>(), l.lerp ? bc.data_ptr() : nullptr,
        ac.defined() ? ac.data_ptr() : nullptr, l, x.dtype(), dout.dtype()));
  }
  // A per-head s gathers every row's products (a fixed-order sum over rows).
  g.ds = l.per_row ? ds_rows.view(s.shape()) : sum(ds_rows, 0);
  return g;
}

}  // namespace primer::ops
