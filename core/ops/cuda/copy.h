// CUDA launchers: strided copy with dtype conversion, and fill (compute stream).
#pragma once
#include "core/ops/kernel_args.h"

namespace primer::ops::cuda_ops {

void copy(const StridedDesc& dst, const StridedDesc& src);
void fill(const StridedDesc& dst, double value);

}  // namespace primer::ops::cuda_ops
