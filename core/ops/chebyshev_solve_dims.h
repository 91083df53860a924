// Sizes and options of a Chebyshev-solve call, shared by the CPU and CUDA implementations (nvcc-safe: no Tensor).
#pragma once
#include <cstdint>

namespace primer::ops {

struct ChebyshevDims {
  int64_t batch = 0, time = 0, heads = 0, dim = 0;  // q, k [B, T, H, D]
  double ridge = 0;                                 // λ_t / ‖H_t‖_F
  int64_t num_iter = 0;
  bool bp_lambda = true;
  bool precise_iterate = true;  // CUDA: the iterate as hi + lo bf16 operands (ChebyshevOptions)
  bool f16_operands = false;    // CUDA, Hopper, f32 with precise_iterate: fp16 operands instead (ChebyshevOptions)
  bool has_gk = false, has_state_in = false;

  // Tokens per chunk of the chunked algorithms (the reference implementation's chunk size).
  static constexpr int64_t kChunk = 64;
  int64_t chunks() const { return (time + kChunk - 1) / kChunk; }
  int64_t heads_total() const { return batch * heads; }
};

// For λ = a‖H‖_F the spectrum of H + λI lies in [μ, L] = [a‖H‖_F, (1+a)‖H‖_F] (λ_max(H) ≤ ‖H‖_F for PSD H), so
// the Chebyshev contraction ρ = (L−μ)/(L+μ) = 1/(1+2a) is the same for every token, and so is the weight schedule
// ω_0 = 2, ω_i = 4 / (4 − ρ² ω_{i−1}) (the standard Chebyshev semi-iteration; the GKA paper's Algorithm 1 box prints
// ω_0 = 0, a typo). The per-token step is 2/(L+μ) = 2 / ((1+2a)‖H‖_F).
inline double chebyshev_rho(double ridge) { return 1.0 / (1.0 + 2.0 * ridge); }

}  // namespace primer::ops
