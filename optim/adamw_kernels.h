// The fused AdamW update over one parameter (CPU loop and CUDA launcher).
#pragma once
#include <cstdint>

namespace primer::optim {

struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1, bias_correction2;  // 1 - beta^t
  float max_grad_norm;                       // <= 0: no clipping
};

// master/m/v/grad f32 [n]; compute_bf16 (nullable) receives the rounded master; grad_sumsq points to the global
// sum of squared gradients (device memory for the CUDA launcher, host memory for the CPU loop).
void adamw_update_cpu(float* master, float* m, float* v, const float* grad, int64_t n, const AdamWStep& s,
                      const float* grad_sumsq);
void adamw_update_cuda(float* master, float* m, float* v, const float* grad, void* compute_bf16, int64_t n,
                       const AdamWStep& s, const float* grad_sumsq);

}  // namespace primer::optim
