// Inputs for the Chebyshev-solve tests, shaped like the GKA layer's: unit-norm keys (the layer L2-normalises them),
// log decays in [−0.5, −0.02] and a symmetric positive semi-definite initial state (a key covariance).
#pragma once
#include <cmath>

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

}  // namespace primer::test
