#include <cuda_bf16.h>

#include "core/cuda_runtime.h"
#include "optim/adamw_kernels.h"

namespace primer::optim {
namespace {

__global__ void adamw_kernel(float* __restrict__ master, float* __restrict__ m, float* __restrict__ v,
                             const float* __restrict__ grad, __nv_bfloat16* __restrict__ compute, int64_t n,
                             AdamWStep s, const float* __restrict__ grad_sumsq) {
  float coef = 1.0f;
  if (s.max_grad_norm > 0) {
    const float norm = sqrtf(*grad_sumsq);
    if (norm > s.max_grad_norm) coef = s.max_grad_norm / (norm + 1e-6f);
  }
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = grad[i] * coef;
    const float mi = s.beta1 * m[i] + (1 - s.beta1) * g;
    const float vi = s.beta2 * v[i] + (1 - s.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi / s.bias_correction1) / (sqrtf(vi / s.bias_correction2) + s.eps);
    const float p = master[i] - s.lr * (update + s.weight_decay * master[i]);
    master[i] = p;
    if (compute) compute[i] = __float2bfloat16_rn(p);
  }
}

}  // namespace

void adamw_update_cuda(float* master, float* m, float* v, const float* grad, void* compute_bf16, int64_t n,
                       const AdamWStep& s, const float* grad_sumsq) {
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 132 * 16);
  adamw_kernel<<<unsigned(blocks > 0 ? blocks : 1), threads, 0, cuda::stream()>>>(
      master, m, v, grad, static_cast<__nv_bfloat16*>(compute_bf16), n, s, grad_sumsq);
  PRIMER_CUDA_CHECK_LAUNCH();
}

}  // namespace primer::optim
