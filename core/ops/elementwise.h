// Elementwise ops: binary ops with numpy broadcasting, scaling, in-place accumulation and unary activations.
// CPU computes in f32/f64; CUDA takes f32/bf16 and computes in fp32. Results are new contiguous tensors.
#pragma once
#include "core/ops/elementwise_math.h"  // enum class Unary, Binary
#include "core/tensor.h"

namespace primer::ops {

// a op b with numpy broadcasting (trailing dims aligned, size-1 dims stretched); a and b of one dtype and device.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& a, double s);  // a * s
// a + b rounded once to out_dtype: a and b of one shape, dtype and device (no broadcasting). One pass on CUDA (f32 and
// bf16 either way: two paths' f32 gradients summed into an activation's bf16 one); on the CPU the sum, then the cast.
Tensor add(const Tensor& a, const Tensor& b, DType out_dtype);

// dst += alpha * src in place, same shape; dst contiguous. CUDA: dst f32/bf16, src f32/bf16 (e.g. an f32 gradient
// accumulator fed bf16 gradients); CPU: both f32 or both f64.
void add_(const Tensor& dst, const Tensor& src, double alpha = 1.0);

// y = f(x) and its backward dx = dy * f'(x) (x, dy same shape and dtype).
Tensor unary(Unary op, const Tensor& x);
Tensor unary_backward(Unary op, const Tensor& x, const Tensor& dy);

// Backward of broadcasting: sums g over the dims that broadcasting stretched, returning `shape`
// (which must broadcast to g's shape). Same dtype as g.
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

}  // namespace primer::ops
