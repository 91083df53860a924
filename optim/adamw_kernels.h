// The fused AdamW update (CPU loop and CUDA launchers) and, on CUDA, the global squared gradient norm. On the GPU
// every parameter is handled by a few launches: the tensors are batched into each launch's arguments and each block
// takes one chunk of one tensor (a model has hundreds of parameters, many of them small; one launch each left the
// GPU waiting on the host).
#pragma once
#include <cstdint>
#include <vector>

namespace primer::optim {

struct AdamWStep {
  float lr, beta1, beta2, eps;
  float bias_correction1, bias_correction2;  // 1 - beta^t
  float max_grad_norm;                       // <= 0: no clipping
};

// One parameter's buffers: master/m/v/grad f32 [n]; compute_bf16 (nullable, CUDA only) receives the rounded master.
struct AdamWBuffers {
  float* master;
  float* m;
  float* v;
  const float* grad;
  void* compute_bf16;
  int64_t n;
  float weight_decay;
};

// grad_sumsq points to the global sum of squared gradients: host memory for the CPU loop, device memory for CUDA.
void adamw_update_cpu(const AdamWBuffers& p, const AdamWStep& s, const float* grad_sumsq);
void adamw_update_cuda(const std::vector<AdamWBuffers>& params, const AdamWStep& s, const float* grad_sumsq);

// *sumsq (device f32) = Σ over the tensors of Σ g² (f32 per chunk of a tensor, the chunks summed in double in a fixed
// order: the same bits every run).
struct GradSpan {
  const float* grad;
  int64_t n;
};
void grad_sumsq_cuda(const std::vector<GradSpan>& grads, float* sumsq);

}  // namespace primer::optim
