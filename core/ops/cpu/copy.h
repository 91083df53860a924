// CPU strided copy with dtype conversion, and fill.
#pragma once
#include "core/ops/kernel_args.h"

namespace primer::ops::cpu {

void copy(const StridedDesc& dst, const StridedDesc& src);
void fill(const StridedDesc& dst, double value);

}  // namespace primer::ops::cpu
