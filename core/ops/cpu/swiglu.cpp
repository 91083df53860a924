#include "core/ops/cpu/swiglu.h"

#include <cmath>

#include "core/ops/dispatch.h"

namespace primer::ops::cpu {
namespace {

template <class T> T sigmoid(T g) { return T(1) / (T(1) + std::exp(-g)); }

template <class T> void forward(T* h, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 14))
  for (int64_t i = 0; i < n; ++i) h[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

// silu'(g) = s * (1 + g * (1 - s)) with s = sigmoid(g).
template <class T> void backward(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i], s = sigmoid(g);
    dgate[i] = dh[i] * up[i] * s * (T(1) + g * (T(1) - s));
    dup[i] = dh[i] * g * s;
  }
}

}  // namespace

void swiglu(const Tensor& h, const Tensor& gate, const Tensor& up) {
  dispatch_cpu_float(gate.dtype(), "swiglu", [&](auto tag) {
    using T = decltype(tag);
    forward<T>(h.data<T>(), gate.data<T>(), up.data<T>(), gate.numel());
  });
}

void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dh, const Tensor& gate, const Tensor& up) {
  dispatch_cpu_float(gate.dtype(), "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    backward<T>(dgate.data<T>(), dup.data<T>(), dh.data<T>(), gate.data<T>(), up.data<T>(), gate.numel());
  });
}

}  // namespace primer::ops::cpu
