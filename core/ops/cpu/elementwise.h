// Elementwise kernels, CPU loops (f32/f64; the fp64 reference). Dense arrays of n elements unless a StridedDesc says
// otherwise.
#pragma once
#include <cstdint>

#include "core/ops/elementwise_math.h"
#include "core/ops/kernel_args.h"

namespace primer::ops::cpu {

// out (contiguous) = a op b; a and b are laid out over out's shape with stride 0 on broadcast dims; one dtype.
void binary(Binary op, const StridedDesc& out, const StridedDesc& a, const StridedDesc& b);
void scale(void* out, const void* x, int64_t n, DType dtype, double s);
// dst += alpha * src.
void add_inplace(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n, double alpha);
void unary(Unary op, void* y, const void* x, int64_t n, DType dtype);
void unary_backward(Unary op, void* dx, const void* x, const void* dy, int64_t n, DType dtype);

}  // namespace primer::ops::cpu
