// Inputs for the Chebyshev-solve tests, shaped like the GKA layer's: unit-norm keys (the layer L2-normalises them),
// log decays in [−0.5, −0.02] and a symmetric positive semi-definite initial state (a key covariance).
#pragma once
#include <cmath>
#include <vector>

#include "tests/support/test_util.h"

namespace primer::test {

struct ChebyshevInputs {
  Tensor q, k, gk, state;  // gk and state undefined unless asked for; all f64 on the CPU
};

inline ChebyshevInputs chebyshev_inputs(int64_t B, int64_t T, int64_t H, int64_t D, uint64_t seed, bool with_gk,
                                        bool with_state) {
  ChebyshevInputs in;
  in.q = randn({B, T, H, D}, seed);
  in.k = randn({B, T, H, D}, seed + 1);
  double* k = in.k.data<double>();
  for (int64_t r = 0; r < B * T * H; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += k[r * D + i] * k[r * D + i];
    for (int64_t i = 0; i < D; ++i) k[r * D + i] /= std::sqrt(ss);
  }
  if (with_gk) in.gk = rand_uniform({B, T, H}, seed + 2, -0.5, -0.02);
  if (with_state) {
    // A Aᵀ / D per head, with A ~ N(0, 1): PSD, Frobenius norm about that of a few accumulated unit keys.
    const Tensor A = randn({B, H, D, D}, seed + 3);
    in.state = Tensor::zeros({B, H, D, D}, DType::F64);
    const double* a = A.data<double>();
    double* s = in.state.data<double>();
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t i = 0; i < D; ++i)
        for (int64_t j = 0; j < D; ++j) {
          double acc = 0;
          for (int64_t l = 0; l < D; ++l) acc += a[(bh * D + i) * D + l] * a[(bh * D + j) * D + l];
          s[(bh * D + i) * D + j] = acc / double(D);
        }
  }
  return in;
}

// Keys and queries as a trained layer's look, where the solve is hard: anisotropic (per head, a fixed random mixing
// of coordinates whose scales fall as (i + 1)^-0.75, plus a shared mean direction), then unit-normalised; long
// memory (log decays in [−0.05, −0.001]); and an initial state that is the decayed covariance of 256 earlier keys
// of the same law. H_t then spans a few directions strongly and the rest barely, so the solve meets its full
// condition number κ = (1 + ridge)/ridge, which isotropic keys under fast decay (chebyshev_inputs) do not reach.
inline ChebyshevInputs correlated_chebyshev_inputs(int64_t B, int64_t T, int64_t H, int64_t D, uint64_t seed) {
  constexpr int64_t kHistory = 256;
  const Tensor mixing = randn({H, D, D}, seed + 4), mean = randn({H, D}, seed + 5);
  const double* m = mixing.data<double>();
  const double* mu = mean.data<double>();
  std::vector<double> scale(static_cast<size_t>(D));
  for (int64_t j = 0; j < D; ++j) scale[size_t(j)] = std::pow(double(j + 1), -0.75);
  // Rows of z [rows, H, D] mapped to unit vectors of the law above, in place.
  auto shape_rows = [&](Tensor& z, int64_t rows) {
    double* v = z.data<double>();
    std::vector<double> out(static_cast<size_t>(D));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < H; ++h) {
        double* row = v + (r * H + h) * D;
        double ss = 0;
        for (int64_t i = 0; i < D; ++i) {
          double acc = 0.5 * mu[h * D + i];
          for (int64_t j = 0; j < D; ++j) acc += m[(h * D + i) * D + j] * scale[size_t(j)] * row[j];
          out[size_t(i)] = acc / std::sqrt(double(D));
          ss += out[size_t(i)] * out[size_t(i)];
        }
        for (int64_t i = 0; i < D; ++i) row[i] = out[size_t(i)] / std::sqrt(ss);
      }
  };
  ChebyshevInputs in;
  in.q = randn({B, T, H, D}, seed);
  in.k = randn({B, T, H, D}, seed + 1);
  shape_rows(in.q, B * T);
  shape_rows(in.k, B * T);
  in.gk = rand_uniform({B, T, H}, seed + 2, -0.05, -0.001);
  Tensor history = randn({B, kHistory, H, D}, seed + 3);
  shape_rows(history, B * kHistory);
  const Tensor decay = rand_uniform({B, kHistory, H}, seed + 6, -0.05, -0.001);
  in.state = Tensor::zeros({B, H, D, D}, DType::F64);
  double* s = in.state.data<double>();
  const double* k = history.data<double>();
  const double* g = decay.data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      double* S = s + (b * H + h) * D * D;
      for (int64_t t = 0; t < kHistory; ++t) {
        const double a = std::exp(g[(b * kHistory + t) * H + h]);
        const double* kt = k + ((b * kHistory + t) * H + h) * D;
        for (int64_t i = 0; i < D; ++i)
          for (int64_t j = 0; j < D; ++j) S[i * D + j] = a * S[i * D + j] + kt[i] * kt[j];
      }
    }
  return in;
}

}  // namespace primer::test
