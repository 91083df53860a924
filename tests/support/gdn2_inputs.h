// Realistic random inputs of the gated delta rule-2 (Gated DeltaNet-2's core), as the layer produces them: q, k
// L2-normalised per head, v ~ N(0, 1), the log decay g = decay·log σ(z) ≤ 0 per key channel, the erase gate
// b = b_max·σ(z) per key channel (b_max = 2: the negative-eigenvalue variant), the write gate w = σ(z) per value
// channel, an O(1) initial state. All f64 on the CPU.
#pragma once
#include <cmath>
#include <vector>

#include "tests/support/test_util.h"

namespace primer::test {

struct Gdn2Inputs {
  Tensor q, k, v, g, b, w, state;
};

inline Tensor unit_rows(const Shape& s, uint64_t seed) {
  std::vector<double> x = randn(s, seed).to_vector<double>();
  const size_t K = size_t(s.back());
  for (size_t r = 0; r < x.size() / K; ++r) {
    double ss = 0;
    for (size_t i = 0; i < K; ++i) ss += x[r * K + i] * x[r * K + i];
    for (size_t i = 0; i < K; ++i) x[r * K + i] /= std::sqrt(ss);
  }
  return Tensor::from_vector(x, s, DType::F64);
}

// factor·σ(z), or factor·log σ(z) with `log`, for z ~ N(0, 1).
inline Tensor sigmoid_of_normal(const Shape& s, uint64_t seed, double factor, bool log) {
  std::vector<double> x = randn(s, seed).to_vector<double>();
  for (double& z : x) z = log ? -factor * std::log1p(std::exp(-z)) : factor / (1 + std::exp(-z));
  return Tensor::from_vector(x, s, DType::F64);
}

inline Gdn2Inputs gdn2_inputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, uint64_t seed, double b_max = 1.0,
                              double decay = 1.0) {
  Gdn2Inputs in;
  in.q = unit_rows({B, T, H, K}, seed + 1);
  in.k = unit_rows({B, T, H, K}, seed + 2);
  in.v = randn({B, T, H, V}, seed + 3);
  in.g = sigmoid_of_normal({B, T, H, K}, seed + 4, decay, true);
  in.b = sigmoid_of_normal({B, T, H, K}, seed + 5, b_max, false);
  in.w = sigmoid_of_normal({B, T, H, V}, seed + 6, 1.0, false);
  in.state = randn({B, H, K, V}, seed + 7);
  return in;
}

}  // namespace primer::test
