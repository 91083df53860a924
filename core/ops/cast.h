// Copies and dtype conversions (any strides, same device), and fills.
#pragma once
#include "core/dtype.h"

namespace primer {
class Tensor;
}

namespace primer::ops {

// dst[i] = convert(src[i]) for every index; shapes equal, devices equal, strides arbitrary.
void copy(const Tensor& dst, const Tensor& src);
Tensor cast(const Tensor& x, DType dtype);  // contiguous result
void fill(const Tensor& dst, double value);

}  // namespace primer::ops
