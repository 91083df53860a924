// Realistic random inputs of the gated delta rule, as the Gated DeltaNet layer produces them: q and k
// L2-normalised per head, v standard normal, β = σ(z) ∈ (0, 1) (or 2σ(z) ∈ (0, 2) with negative eigenvalues
// allowed), g = log σ(z) ≤ 0 (a decay e^g ∈ (0, 1)), and an initial state of O(1) entries.
#pragma once
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace primer::test {

struct GatedDeltaInputs {
  Tensor q, k, v, g, beta, state;  // f64 CPU
};

inline GatedDeltaInputs gated_delta_inputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, uint64_t seed,
                                           double beta_max = 1.0) {
  auto normal = [](const Shape& s, uint64_t key) {
    std::vector<double> x(size_t(shape_numel(s)));
    for (size_t i = 0; i < x.size(); ++i) x[i] = normal01(key, i);
    return x;
  };
  auto unit_rows = [&](uint64_t key) {
    std::vector<double> x = normal({B, T, H, K}, key);
    for (size_t r = 0; r < x.size() / size_t(K); ++r) {
      double ss = 0;
      for (int64_t i = 0; i < K; ++i) ss += x[r * size_t(K) + size_t(i)] * x[r * size_t(K) + size_t(i)];
      for (int64_t i = 0; i < K; ++i) x[r * size_t(K) + size_t(i)] /= std::sqrt(ss);
    }
    return Tensor::from_vector(x, {B, T, H, K}, DType::F64);
  };
  std::vector<double> z = normal({B, T, H}, seed + 4), gate = normal({B, T, H}, seed + 5);
  for (double& x : z) x = beta_max / (1 + std::exp(-x));
  for (double& x : gate) x = -std::log1p(std::exp(-x));  // log σ(x)
  GatedDeltaInputs in;
  in.q = unit_rows(seed + 1);
  in.k = unit_rows(seed + 2);
  in.v = Tensor::from_vector(normal({B, T, H, V}, seed + 3), {B, T, H, V}, DType::F64);
  in.beta = Tensor::from_vector(z, {B, T, H}, DType::F64);
  in.g = Tensor::from_vector(gate, {B, T, H}, DType::F64);
  in.state = Tensor::from_vector(normal({B, H, K, V}, seed + 6), {B, H, K, V}, DType::F64);
  return in;
}

}  // namespace primer::test
