// Realistic random inputs of Kaczmarz linear attention's core: the gated delta rule's (q unit rows, v standard
// normal, g = log σ(z), an O(1) initial state) but with raw keys, whose norms the layer leaves as they come
// (silu(conv(W x))): each key row is a unit direction times a norm drawn log-uniformly in [0.05, 5], so that
// β = η/(‖k‖² + ε) spans 0.04 to 400 and key-norm ratios inside a chunk reach 100; η = σ(z) ∈ (0, 1).
#pragma once
#include <cmath>

#include "tests/support/gated_delta_inputs.h"

namespace primer::test {

struct KaczmarzInputs {
  Tensor q, k, v, g, eta, state;  // f64 CPU
};

inline KaczmarzInputs kaczmarz_inputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, uint64_t seed) {
  const GatedDeltaInputs unit = gated_delta_inputs(B, T, H, K, V, seed);
  KaczmarzInputs in{unit.q, unit.k.clone(), unit.v, unit.g, unit.beta, unit.state};
  double* k = in.k.data<double>();
  for (int64_t r = 0; r < B * T * H; ++r) {
    const double norm = 0.05 * std::pow(100.0, uniform01(seed + 7, uint64_t(r)));
    for (int64_t i = 0; i < K; ++i) k[r * K + i] *= norm;
  }
  return in;
}

}  // namespace primer::test
