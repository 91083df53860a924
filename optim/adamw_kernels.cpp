#include <cmath>

#include "optim/adamw_kernels.h"

namespace primer::optim {
namespace {
float clip_coefficient(float sumsq, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const float norm = std::sqrt(sumsq);
  return norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f;
}
}  // namespace

void adamw_update_cpu(const AdamWBuffers& p, const AdamWStep& s, const float* grad_sumsq) {
  const float coef = clip_coefficient(*grad_sumsq, s.max_grad_norm);
  float *master = p.master, *m = p.m, *v = p.v;
  const float* grad = p.grad;
#pragma omp parallel for schedule(static) if (p.n > (1 << 15))
  for (int64_t i = 0; i < p.n; ++i) {
    const float g = grad[i] * coef;
    m[i] = s.beta1 * m[i] + (1 - s.beta1) * g;
    v[i] = s.beta2 * v[i] + (1 - s.beta2) * g * g;
    const float update = (m[i] / s.bias_correction1) / (std::sqrt(v[i] / s.bias_correction2) + s.eps);
    master[i] -= s.lr * (update + p.weight_decay * master[i]);
  }
}

}  // namespace primer::optim
