// Random inputs of Kalman linear attention's core (ops::kalman_scan) with the conditioning the layer produces and the
// paper's stress cases (small process noise, large observation precision).
#pragma once
#include <cmath>

#include "core/rng.h"
#include "core/tensor.h"

namespace primer::test {

struct KalmanInputs {
  Tensor q, k, v, value_precision, a_bar, p_bar, precision, info_mean;  // f64 CPU
};

// Unit keys and queries over N (the authors' QK-norm), v ~ N(0, 1), Λᵛ = 1/(softplus(z) + 1e-4) scaled by
// `precision_scale`, ā = exp(−Δ) with Δ log-uniform in [1e-3, 0.1] (the authors' init, |a| = 1) widened to [1e-3, 1],
// p̄ log-uniform in [p_lo, p_hi], λ_0 ∈ [0.5, 2], η_0 ~ N(0, 1).
inline KalmanInputs kalman_inputs(int64_t B, int64_t T, int64_t H, int64_t N, int64_t D, uint64_t seed,
                                  double p_lo = 1e-3, double p_hi = 0.3, double precision_scale = 1.0) {
  auto fill = [](const Shape& s, auto&& f) {
    Tensor t = Tensor::empty(s, DType::F64);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = f(uint64_t(i));
    return t;
  };
  auto unit_rows = [&](uint64_t key) {
    Tensor t = fill({B, T, H, N}, [&](uint64_t i) { return normal01(key, i); });
    for (int64_t r = 0; r < B * T * H; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < N; ++i) ss += t.data<double>()[r * N + i] * t.data<double>()[r * N + i];
      for (int64_t i = 0; i < N; ++i) t.data<double>()[r * N + i] /= std::sqrt(ss);
    }
    return t;
  };
  KalmanInputs in;
  in.q = unit_rows(seed + 1);
  in.k = unit_rows(seed + 2);
  in.v = fill({B, T, H, D}, [&](uint64_t i) { return normal01(seed + 3, i); });
  in.value_precision = fill(
      {B, T, H, D}, [&](uint64_t i) { return precision_scale / (std::log1p(std::exp(normal01(seed + 4, i))) + 1e-4); });
  in.a_bar = fill({H, N, D}, [&](uint64_t i) { return std::exp(-1e-3 * std::pow(1e3, uniform01(seed + 5, i))); });
  in.p_bar = fill({H, N, D}, [&](uint64_t i) { return p_lo * std::pow(p_hi / p_lo, uniform01(seed + 6, i)); });
  in.precision = fill({B, H, N, D}, [&](uint64_t i) { return 0.5 * std::pow(4.0, uniform01(seed + 7, i)); });
  in.info_mean = fill({B, H, N, D}, [&](uint64_t i) { return normal01(seed + 8, i); });
  return in;
}

}  // namespace primer::test
