// CPU GEMM (f32 and f64; A, B and C of one dtype): OpenBLAS when available, else a cache-blocked OpenMP kernel.
#pragma once
#include "core/ops/gemm_args.h"

namespace primer::ops::cpu {

void gemm(const GemmArgs& g);

}  // namespace primer::ops::cpu
