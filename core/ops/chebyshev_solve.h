// Gated KalmaNet's solver: for every token, a Chebyshev approximation of the ridge-regularised solve against the
// gated key covariance, computed chunk-wise without materialising every H_t. Per batch b, head h, token t, with an
// fp32 state H [K, K]:
//   H_t = exp(gk_t) · H_{t−1} + k_t k_tᵀ           H_0 = state_in (zeros if undefined); gk undefined: no decay
//   λ_t = ridge · ‖H_t‖_F
//   x_t = CH(H_t + λ_t I, q_t, num_iter)           the Chebyshev semi-iteration on [λ_t, λ_t + ‖H_t‖_F] with
//                                                  ω_0 = 2 (chebyshev_solve_dims.h); num_iter = 0: x = q
// The backward is implicit differentiation (GKA paper §4.2.2): the adjoint solve dq_t = CH(H_t + λ_t I, dx_t),
// dH_t = −dq_t x_tᵀ, plus, with bp_lambda, the path through ‖H_t‖_F. Three implementations that must agree:
// reference:: (token by token in f64), the chunked CPU path (f32/f64) and the chunked CUDA kernels.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace primer::ops {

struct ChebyshevOptions {
  double ridge = 0.02;  // λ_t / ‖H_t‖_F
  int64_t num_iter = 30;
  bool bp_lambda = true;  // backward: differentiate through λ_t = ridge·‖H_t‖_F (else λ_t is held constant)
  // CUDA: the iterate (and its product with the keys) enter the tensor cores as hi + lo bf16 pairs, ~16-bit
  // operands; false: one bf16 each, faster, but their 2^-9 rounding is amplified by up to κ = (1 + ridge)/ridge.
  // The CPU paths compute in their own precision and ignore it.
  bool precise_iterate = true;
  // CUDA on Hopper, f32 q and k with precise_iterate (bf16 training's precise mode): the iteration's operands as
  // fp16, X, P = (X Kᵀ) ⊙ M and K one each (the keys as the bf16 values the other kernels take), H_0 and the
  // backward's one product H x as fp16 hi + lo pairs, each scaled into fp16's range per row; the one-bf16 iterate's
  // product count at 2^-12 roundings. Other GPUs keep the bf16 pairs.
  bool f16_operands = false;
};

// q, k [B, T, H, K]; gk [B, T, H] log decay or undefined. CPU: all f32 or all f64. CUDA: q, k bf16 or f32 (f32 keys
// are rounded to bf16 as tensor-core operands; f32 keeps x, dq and dk unrounded and the backward's products with x
// and dq at ~16 bits, cuda/chebyshev_solve.h); gk and state_in f32; K of 64 or 128. A token whose ‖H_t‖_F is 0 (no key
// yet) gets x = 0. Returns x [B, T, H, K] in q's dtype; if state_out is non-null it receives H_T [B, H, K, K] (f32; f64
// for f64 inputs). If chunk_states is non-null, the CUDA path hands over the chunk-start states it computed (f32, [B·H,
// chunks + 1, K, K]) for the backward, which then need not recompute them; the CPU paths, and a solve with num_iter 0,
// leave it undefined.
Tensor chebyshev_solve(const Tensor& q, const Tensor& k, const Tensor& gk, const ChebyshevOptions& options,
                       const Tensor& state_in, Tensor* state_out, Tensor* chunk_states = nullptr);

struct ChebyshevGrads {
  Tensor dq, dk;     // like q, k
  Tensor dgk;        // like gk; defined iff gk is
  Tensor dstate_in;  // like state_in; defined iff state_in is
};
// Gradients of <dx, x> + <dstate_out, H_T> (dstate_out may be undefined: zero); x is the forward's output, and
// chunk_states (may be undefined) the forward's, from the same inputs.
ChebyshevGrads chebyshev_solve_backward(const Tensor& dx, const Tensor& x, const Tensor& q, const Tensor& k,
                                        const Tensor& gk, const ChebyshevOptions& options, const Tensor& state_in,
                                        const Tensor& dstate_out, const Tensor& chunk_states = Tensor());

namespace reference {
// The ground truth: H_t materialised token by token and the iteration run on it, f64 CPU tensors only, with the
// hand-written implicit backward above.
Tensor chebyshev_solve(const Tensor& q, const Tensor& k, const Tensor& gk, const ChebyshevOptions& options,
                       const Tensor& state_in, Tensor* state_out);
ChebyshevGrads chebyshev_solve_backward(const Tensor& dx, const Tensor& x, const Tensor& q, const Tensor& k,
                                        const Tensor& gk, const ChebyshevOptions& options, const Tensor& state_in,
                                        const Tensor& dstate_out);
}  // namespace reference

}  // namespace primer::ops
