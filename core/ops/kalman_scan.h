// Kalman linear attention's core (KLA; Shaj et al., "Kalman Linear Attention", 2026, Eqs. 16-23): per batch b, head
// h, state slot n and channel d an independent scalar Kalman filter in information form (precision λ, information
// mean η = λμ), with time-invariant dynamics ā, p̄ [H, N, D] and token-dependent key k_t[n], query q_t[n], value
// v_t[d] and value precision Λᵛ_t[d]:
//   φ_t = k_t[n]² Λᵛ_t[d],  b_t = k_t[n] Λᵛ_t[d] v_t[d],  ρ_t = 1/(ā² + p̄ λ_{t−1})
//   λ_t = ρ_t λ_{t−1} + φ_t            (the Möbius map of Theorem 1)
//   η_t = ā ρ_t η_{t−1} + b_t          (the affine recursion of Theorem 2; its gate f_t = ā ρ_t)
//   y_t[d] = Σ_n q_t[n] η_t / λ_t,     y_var_t[d] = Σ_n q_t[n]² / λ_t   (the optional variance readout)
// with λ_0, η_0 the carried state (the authors' code starts from λ_0 = 1, η_0 = 0).
// This file holds the ground truth: f64, token by token, with the hand-written backward of two reverse scalar
// scans (first η's adjoint, then λ's, which needs the gate gradients of the first), not through 2×2 Jacobians.
// ops::kalman_scan is the implementation that runs: on the CPU (f32 or f64) by chunks of trace-normalised Möbius
// products and the affine recursion (core/ops/cpu/kalman_scan.h); on CUDA in moment form (P = 1/λ, μ = η/λ), a thread
// stepping 4 filters, with f32 or bf16 per-token tensors and f32 dynamics and states (core/ops/cuda/kalman_scan.cu).
#pragma once
#include "core/tensor.h"

namespace primer::ops {

struct KalmanScanOutputs {
  Tensor y;          // [B, T, H, D]
  Tensor y_var;      // [B, T, H, D]; defined when asked for
  Tensor precision;  // λ_T [B, H, N, D]
  Tensor info_mean;  // η_T [B, H, N, D]
  // CUDA, when asked for: the filters' states every 64 tokens and at the end (f32, flat), which spare the backward
  // its forward pass; the CPU paths leave it undefined.
  Tensor checkpoints;
};

struct KalmanScanGrads {
  Tensor dq, dk;                        // [B, T, H, N]
  Tensor dv, dvalue_precision;          // [B, T, H, D]
  Tensor da_bar, dp_bar;                // [H, N, D]
  Tensor dprecision_in, dinfo_mean_in;  // [B, H, N, D]
};

// As reference:: below; on the CPU every tensor f32 or every tensor f64; on CUDA q, k, v, value_precision (and dy,
// dy_var, y, y_var and their gradients) f32 or bf16, the rest f32, N a multiple of 16 up to 128. keep_checkpoints:
// return the checkpoints (CUDA), for a backward from the same inputs to take.
KalmanScanOutputs kalman_scan(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& value_precision,
                              const Tensor& a_bar, const Tensor& p_bar, const Tensor& precision_in,
                              const Tensor& info_mean_in, bool with_variance, bool keep_checkpoints = false);
// checkpoints: the forward's (may be undefined: the backward then recomputes them), from the same inputs.
KalmanScanGrads kalman_scan_backward(const Tensor& dy, const Tensor& dy_var, const Tensor& dprecision_out,
                                     const Tensor& dinfo_mean_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& value_precision, const Tensor& a_bar, const Tensor& p_bar,
                                     const Tensor& precision_in, const Tensor& info_mean_in,
                                     const Tensor& checkpoints = Tensor());

namespace reference {
// q, k [B, T, H, N]; v, value_precision [B, T, H, D] (Λᵛ > 0); a_bar, p_bar [H, N, D] (ā > 0, p̄ ≥ 0);
// precision_in (λ_0 > 0) and info_mean_in [B, H, N, D]. All f64 on the CPU.
KalmanScanOutputs kalman_scan(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& value_precision,
                              const Tensor& a_bar, const Tensor& p_bar, const Tensor& precision_in,
                              const Tensor& info_mean_in, bool with_variance);
// Gradients of <dy, y> + <dy_var, y_var> + <dprecision_out, λ_T> + <dinfo_mean_out, η_T>; any of the four may be
// undefined (zero).
KalmanScanGrads kalman_scan_backward(const Tensor& dy, const Tensor& dy_var, const Tensor& dprecision_out,
                                     const Tensor& dinfo_mean_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& value_precision, const Tensor& a_bar, const Tensor& p_bar,
                                     const Tensor& precision_in, const Tensor& info_mean_in);
}  // namespace reference

}  // namespace primer::ops
