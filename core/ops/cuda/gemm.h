// CUDA GEMM through cuBLASLt: A/B bf16 (or f32, TF32 off), fp32 accumulation, C bf16 or f32, on the compute stream.
// One handle and a 32 MiB workspace per device; the matmul descriptors and the heuristic's algorithm list are cached
// per argument layout, so steady-state calls do no heuristic query.
#pragma once
#include "core/ops/gemm_args.h"

namespace primer::ops::cuda_ops {

void gemm(const GemmArgs& g);
// See ops::set_gemm_autotune.
void set_autotune(bool enabled);

// For benchmarks: how many algorithms the heuristic proposes for this layout (up to 32, in the heuristic's order),
// and a run with algorithm `index`. Returns false when that algorithm cannot run the problem.
int gemm_algorithm_count(const GemmArgs& g);
bool gemm_with_algorithm(const GemmArgs& g, int index);

}  // namespace primer::ops::cuda_ops
