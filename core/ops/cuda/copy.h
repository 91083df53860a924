// CUDA launchers: strided copy with dtype conversion, fill, and the hi + lo split of f32 values (compute stream).
#pragma once
#include <cstdint>

#include "core/ops/kernel_args.h"

namespace primer::ops::cuda_ops {

void copy(const StridedDesc& dst, const StridedDesc& src);
void fill(const StridedDesc& dst, double value);
// hi = bf16(x) and lo = bf16(x − hi) for n dense floats into dense bf16 arrays: as tensor-core operands the pair
// carries ~16 significant bits of x where one bf16 carries 8.
void split_bf16(const float* x, void* hi, void* lo, int64_t n);

}  // namespace primer::ops::cuda_ops
