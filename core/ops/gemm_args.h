// The plain description of one (batched) row-major GEMM that crosses from ops::gemm into the CPU and CUDA backends.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops {

// C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] for b < batch; every matrix is row-major with a unit column
// stride, `ld*` is the row stride and `stride_*` the batch stride, both in elements.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  // CUDA only: beta's C when it is another buffer than the output c (same layout and dtype; null: c itself). The
  // front end (ops::matmul_add) passes it only where cuBLASLt reads it in the epilogue; elsewhere it copies first.
  const void* c_in = nullptr;
  DType a_type = DType::F32, b_type = DType::F32, c_type = DType::F32;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  double alpha = 1.0, beta = 0.0;
};

}  // namespace primer::ops
