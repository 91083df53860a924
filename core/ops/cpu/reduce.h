// Reduction kernels, CPU loops (f32/f64; the fp64 reference).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cpu {

// x dense [outer, r, inner] -> out dense [outer, inner] = multiplier * sum over r; out has x's dtype.
void sum_dim(void* out, const void* x, DType dtype, int64_t outer, int64_t r, int64_t inner, double multiplier);
// out[0] = sum of x[i] (or of x[i]^2) over n dense elements; out is f32 (f64 for f64 x).
void sum_all(void* out, const void* x, DType dtype, int64_t n, bool squares);

}  // namespace primer::ops::cpu
