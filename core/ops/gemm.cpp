#include "core/ops/gemm.h"

#include <algorithm>

#include "core/cuda_runtime.h"
#include "core/ops/cpu/gemm.h"
#include "core/ops/cuda/gemm.h"
#include "core/ops/dispatch.h"

namespace primer::ops {
namespace {

// Row stride usable as a BLAS leading dimension, or 0 when the last dim is not contiguous.
int64_t leading_dim(const Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  if (cols > 1 && t.stride(-1) != 1) return 0;
  const int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : t.stride(-2);
  return ld >= std::max<int64_t>(cols, 1) ? ld : 0;
}

Tensor in_blas_layout(const Tensor& t) { return leading_dim(t) ? t : t.contiguous(); }

void check_dtypes(const Tensor& A, const Tensor& B, const Tensor& C) {
  if (C.is_cpu()) {
    expect(A, "gemm", "A", Device::cpu(), {DType::F32, DType::F64});
    expect(B, "gemm", "B", Device::cpu(), {A.dtype()});
    expect(C, "gemm", "C", Device::cpu(), {A.dtype()});
    return;
  }
  expect(A, "gemm", "A", C.device(), {DType::BF16, DType::F32});
  expect(B, "gemm", "B", C.device(), {A.dtype()});
  if (A.dtype() == DType::BF16)
    expect(C, "gemm", "C", C.device(), {DType::BF16, DType::F32});
  else
    expect(C, "gemm", "C", C.device(), {DType::F32});
}

}  // namespace

GemmArgs gemm_args(const Tensor& A, bool trans_a, const Tensor& B, bool trans_b, const Tensor& C, double alpha,
                   double beta) {
  PRIMER_CHECK(C.defined(), "gemm: argument 'C' is undefined");
  check_dtypes(A, B, C);
  PRIMER_CHECK((A.dim() == 2 || A.dim() == 3) && B.dim() == A.dim() && C.dim() == A.dim(),
               "gemm: A {}, B {}, C {} must all be 2-D, or all 3-D with a leading batch dim", A.describe(),
               B.describe(), C.describe());
  GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = trans_a ? A.size(-1) : A.size(-2);
  g.k = trans_a ? A.size(-2) : A.size(-1);
  g.n = trans_b ? B.size(-2) : B.size(-1);
  const int64_t kb = trans_b ? B.size(-1) : B.size(-2);
  PRIMER_CHECK(kb == g.k, "gemm: argument 'B' is {}, expected {} rows of op(B) to match op(A) = {}{}", B.describe(),
               g.k, A.describe(), trans_a ? " transposed" : "");
  Shape c_shape = {g.m, g.n};
  if (A.dim() == 3) {
    g.batch = A.size(0);
    PRIMER_CHECK(B.size(0) == g.batch, "gemm: argument 'B' is {}, expected batch {} like A", B.describe(), g.batch);
    c_shape.insert(c_shape.begin(), g.batch);
    g.stride_a = A.stride(0);
    g.stride_b = B.stride(0);
    g.stride_c = C.stride(0);
  }
  expect_shape(C, "gemm", "C", c_shape);
  g.lda = leading_dim(A);
  g.ldb = leading_dim(B);
  g.ldc = leading_dim(C);
  PRIMER_CHECK(g.lda && g.ldb, "gemm: A {} and B {} need a contiguous last dim", A.describe(), B.describe());
  PRIMER_CHECK(g.ldc, "gemm: argument 'C' is {} with strides {}, expected a contiguous last dim", C.describe(),
               shape_str(C.strides()));
  g.a = A.data_ptr();
  g.b = B.data_ptr();
  g.c = C.data_ptr();
  g.a_type = A.dtype();
  g.b_type = B.dtype();
  g.c_type = C.dtype();
  g.alpha = alpha;
  g.beta = beta;
  return g;
}

namespace {

// gemm(), with beta's C read from c_in (CUDA, same layout as C) when that is given.
void run_gemm(const Tensor& A, bool trans_a, const Tensor& B, bool trans_b, const Tensor& C, double alpha, double beta,
              const void* c_in) {
  PRIMER_CHECK(A.defined() && B.defined(), "gemm: argument '{}' is undefined", A.defined() ? "B" : "A");
  const Tensor a = in_blas_layout(A), b = in_blas_layout(B);
  GemmArgs g = gemm_args(a, trans_a, b, trans_b, C, alpha, beta);
  g.c_in = c_in;
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  PRIMER_CHECK(!c_in || (beta == 1 && C.is_cuda()), "gemm: a separate C input needs beta 1 on CUDA");
  if (g.k == 0) {  // an empty sum: C = beta * C
    if (beta == 0)
      C.zero_();
    else
      PRIMER_CHECK(beta == 1, "gemm: K = 0 with beta {} is not supported (only 0 or 1)", beta);
    PRIMER_CHECK(!c_in, "gemm: K = 0 with a separate C input is not supported");
    return;
  }
  if (C.is_cpu())
    cpu::gemm(g);
  else
    PRIMER_ON_CUDA(cuda_ops::gemm(g));
}

}  // namespace

void gemm(const Tensor& A, bool trans_a, const Tensor& B, bool trans_b, const Tensor& C, double alpha, double beta) {
  run_gemm(A, trans_a, B, trans_b, C, alpha, beta, nullptr);
}

void set_gemm_autotune([[maybe_unused]] bool enabled) {  // unused in CPU-only builds
  if (cuda::compiled()) PRIMER_ON_CUDA(cuda_ops::set_autotune(enabled));
}

Tensor matmul(const Tensor& A, const Tensor& B, bool trans_a, bool trans_b) {
  PRIMER_CHECK(A.defined() && B.defined(), "matmul: argument '{}' is undefined", A.defined() ? "B" : "A");
  PRIMER_CHECK(A.dim() >= 2 && B.dim() >= 2, "matmul: A {} and B {} must be at least 2-D", A.describe(), B.describe());
  Shape shape = A.shape();
  shape[size_t(A.dim() - 2)] = trans_a ? A.size(-1) : A.size(-2);
  shape.back() = trans_b ? B.size(-2) : B.size(-1);
  Tensor C = Tensor::empty(shape, A.dtype(), A.device());
  gemm(A, trans_a, B, trans_b, C);
  return C;
}

Tensor matmul_add(const Tensor& A, const Tensor& B, const Tensor& addend) {
  PRIMER_CHECK(A.defined() && B.defined() && addend.defined(), "matmul_add: an argument is undefined");
  PRIMER_CHECK(A.dim() == 2 && B.dim() == 2, "matmul_add: A {} and B {} must be 2-D", A.describe(), B.describe());
  Tensor D = Tensor::empty({A.size(0), B.size(1)}, A.dtype(), A.device());
  expect_shape(addend, "matmul_add", "addend", D.shape());
  expect(addend, "matmul_add", "addend", D.device(), {D.dtype()});
  const bool in_epilogue = D.is_cuda() && A.size(1) > 0 && addend.is_contiguous() &&
                           reinterpret_cast<uintptr_t>(addend.data_ptr()) % 16 == 0;
  if (in_epilogue) {
    run_gemm(A, false, B, false, D, 1.0, 1.0, addend.data_ptr());
  } else {
    D.copy_from(addend);
    gemm(A, false, B, false, D, 1.0, 1.0);
  }
  return D;
}

Tensor linear(const Tensor& x, const Tensor& W) {
  PRIMER_CHECK(x.defined() && W.defined(), "linear: argument '{}' is undefined", x.defined() ? "W" : "x");
  PRIMER_CHECK(W.dim() == 2 && x.dim() >= 1 && x.size(-1) == W.size(1),
               "linear: argument 'W' is {}, expected [out, {}] to match x {}", W.describe(), x.size(-1), x.describe());
  Shape y_shape = x.shape();
  y_shape.back() = W.size(0);
  return matmul(x.reshape({-1, W.size(1)}), W, false, true).view(y_shape);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor* dx, const Tensor& dW_accum,
                     const Tensor& dx_addend) {
  PRIMER_CHECK(dy.defined() && x.defined() && W.defined(), "linear_backward: dy, x and W must be defined");
  PRIMER_CHECK(W.dim() == 2 && x.size(-1) == W.size(1),
               "linear_backward: argument 'x' is {}, expected last dim {} to match W {}", x.describe(), W.size(1),
               W.describe());
  Shape y_shape = x.shape();
  y_shape.back() = W.size(0);
  expect_shape(dy, "linear_backward", "dy", y_shape);
  const Tensor dy2 = dy.reshape({-1, W.size(0)});
  if (dx) {
    if (dx_addend.defined()) expect_shape(dx_addend, "linear_backward", "dx_addend", x.shape());
    *dx =
        (dx_addend.defined() ? matmul_add(dy2, W, dx_addend.reshape({-1, W.size(1)})) : matmul(dy2, W)).view(x.shape());
  }
  if (dW_accum.defined()) {
    expect_shape(dW_accum, "linear_backward", "dW_accum", W.shape());
    if (dW_accum.is_cuda()) expect(dW_accum, "linear_backward", "dW_accum", W.device(), {DType::F32});
    gemm(dy2, true, x.reshape({-1, W.size(1)}), false, dW_accum, 1.0, 1.0);
  }
}

}  // namespace primer::ops
