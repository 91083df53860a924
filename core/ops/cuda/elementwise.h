// Elementwise kernels, CUDA launchers (f32/bf16 storage, fp32 math; compute stream). Dense arrays of n elements unless
// a StridedDesc says otherwise.
#pragma once
#include <cstdint>

#include "core/ops/elementwise_math.h"
#include "core/ops/kernel_args.h"

namespace primer::ops::cuda_ops {

// out (contiguous) = a op b; a and b are laid out over out's shape with stride 0 on broadcast dims; one dtype.
void binary(Binary op, const StridedDesc& out, const StridedDesc& a, const StridedDesc& b);
void scale(void* out, const void* x, int64_t n, DType dtype, double s);
// out = a + b over n dense elements, a and b of in_dtype, out of out_dtype (the f32 sum rounded once).
void add_dense(void* out, DType out_dtype, const void* a, const void* b, DType in_dtype, int64_t n);
// dst += alpha * src.
void add_inplace(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n, double alpha);
void unary(Unary op, void* y, const void* x, int64_t n, DType dtype);
void unary_backward(Unary op, void* dx, const void* x, const void* dy, int64_t n, DType dtype);

}  // namespace primer::ops::cuda_ops
