#include "core/ops/cpu/conv1d.h"

#include <cmath>
#include <vector>

namespace primer::ops::cpu {

namespace {

// The input of one (batch, channel) extended to the left by the state: positions -(K-1) .. T-1.
template <class T> struct Sequence {
  const Conv1dDims& d;
  const T* x;
  const T* state_in;
  int64_t b, c;
  T at(int64_t s) const {
    if (s >= 0) return x[(b * d.time + s) * d.channels + c];
    return state_in ? state_in[(b * d.channels + c) * (d.taps - 1) + (d.taps - 1 + s)] : T(0);
  }
  T preactivation(int64_t t, const T* w, const T* bias) const {  // bias + sum_k w[k] x[t - (K-1) + k]
    T z = 0;
    for (int k = 0; k < d.taps; ++k) z += w[c * d.taps + k] * at(t - (d.taps - 1) + k);
    return z + (bias ? bias[c] : T(0));
  }
};

template <class T> T sigmoid(T z) { return T(1) / (T(1) + std::exp(-z)); }

}  // namespace

template <class T> void causal_conv1d(const Conv1dDims& d, const T* x, const T* w, const T* bias, bool silu,
                                      const T* state_in, T* y, T* state_out) {
  const int64_t km1 = d.taps - 1;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t c = 0; c < d.channels; ++c) {
      const Sequence<T> seq{d, x, state_in, b, c};
      for (int64_t t = 0; t < d.time; ++t) {
        const T z = seq.preactivation(t, w, bias);
        y[(b * d.time + t) * d.channels + c] = silu ? z * sigmoid(z) : z;
      }
      if (state_out)
        for (int64_t j = 0; j < km1; ++j) state_out[(b * d.channels + c) * km1 + j] = seq.at(d.time - km1 + j);
    }
}

template <class T> void causal_conv1d_backward(const Conv1dDims& d, const T* dy, const T* x, const T* w, const T* bias,
                                               bool silu, const T* state_in, const T* dstate_out, T* dx, T* dw_accum,
                                               T* dbias_accum, T* dstate_in) {
  const int64_t km1 = d.taps - 1;
  // Threads own channels, so the parameter gradients of a channel are summed by one thread in a fixed order.
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < d.channels; ++c) {
    std::vector<T> dz(size_t(d.time));
    for (int64_t b = 0; b < d.batch; ++b) {
      const Sequence<T> seq{d, x, state_in, b, c};
      for (int64_t t = 0; t < d.time; ++t) {
        const T g = dy[(b * d.time + t) * d.channels + c];
        if (silu) {
          const T z = seq.preactivation(t, w, bias), s = sigmoid(z);
          dz[size_t(t)] = g * s * (T(1) + z * (T(1) - s));
        } else {
          dz[size_t(t)] = g;
        }
        if (dbias_accum) dbias_accum[c] += dz[size_t(t)];
        for (int k = 0; k < d.taps; ++k) dw_accum[c * d.taps + k] += dz[size_t(t)] * seq.at(t - km1 + k);
      }
      // Gradient of every extended input position s: the outputs t = s + K-1 - k it feeds, plus state_out.
      for (int64_t s = -km1; s < d.time; ++s) {
        T g = 0;
        for (int k = 0; k < d.taps; ++k) {
          const int64_t t = s + km1 - k;
          if (t >= 0 && t < d.time) g += dz[size_t(t)] * w[c * d.taps + k];
        }
        if (dstate_out && s >= d.time - km1) g += dstate_out[(b * d.channels + c) * km1 + (s - (d.time - km1))];
        if (s >= 0)
          dx[(b * d.time + s) * d.channels + c] = g;
        else if (dstate_in)
          dstate_in[(b * d.channels + c) * km1 + (km1 + s)] = g;
      }
    }
  }
}

template void causal_conv1d<float>(const Conv1dDims&, const float*, const float*, const float*, bool, const float*,
                                   float*, float*);
template void causal_conv1d<double>(const Conv1dDims&, const double*, const double*, const double*, bool, const double*,
                                    double*, double*);
template void causal_conv1d_backward<float>(const Conv1dDims&, const float*, const float*, const float*, const float*,
                                            bool, const float*, const float*, float*, float*, float*, float*);
template void causal_conv1d_backward<double>(const Conv1dDims&, const double*, const double*, const double*,
                                             const double*, bool, const double*, const double*, double*, double*,
                                             double*, double*);

}  // namespace primer::ops::cpu
