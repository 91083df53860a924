#include "core/ops/cpu/rope.h"

#include <cmath>

#include "core/ops/dispatch.h"

namespace primer::ops::cpu {
namespace {

// The angle is formed in T: one fp32 multiply on the f32 path (as on CUDA), double on the reference path.
template <class T> void rotate(T* y, const T* x, const int32_t* pos, const float* inv_freq, int64_t tokens, int64_t H,
                               int64_t half, bool inverse) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const T angle = T(pos[t]) * T(inv_freq[i]);
      const T c = std::cos(angle);
      const T s = inverse ? -std::sin(angle) : std::sin(angle);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = (t * H + h) * 2 * half;
        const T a = x[base + i], b = x[base + i + half];
        y[base + i] = a * c - b * s;
        y[base + i + half] = b * c + a * s;
      }
    }
  }
}

}  // namespace

void rope(const Tensor& y, const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse) {
  dispatch_cpu_float(x.dtype(), "rope", [&](auto tag) {
    using T = decltype(tag);
    rotate<T>(y.data<T>(), x.data<T>(), positions.data<int32_t>(), inv_freq.data<float>(), positions.numel(), x.size(2),
              inv_freq.numel(), inverse);
  });
}

}  // namespace primer::ops::cpu
