// Scalar-gated linear attention, chunked: the recurrence of Mamba-2's SSD and of simple GLA, which Gated KalmaNet
// also uses for its readout. Per batch b, head h and token t, with an fp32 state S [K, V]:
//   S_t = exp(g_t) · S_{t−1} + k_t v_tᵀ,      o_t = scale · S_tᵀ q_t,      S_0 = state_in (zeros if undefined)
// Three implementations that must agree: reference:: (token by token in f64, straight from the equations), the
// chunked CPU path (f32/f64, chunk kGlaChunk = 64) and the chunked CUDA kernels (bf16/f32 I/O, bf16 tensor-core
// operands, fp32 state and accumulation; a sequential pass over chunk boundaries, then the chunks in parallel).
#pragma once
#include <optional>

#include "core/tensor.h"

namespace primer::ops {

// q, k [B, T, H, K]; v [B, T, H, V]; g [B, T, H] log decay (≤ 0 in models; any finite value is valid).
// CPU: q, k, v, g, state_in all f32 or all f64, any K and V. CUDA: q, k, v all bf16 or all f32; in f32 the keys and
// values are rounded to bf16 for the tensor cores, but q, the chunk states and their gradients enter the products as
// hi + lo bf16 (~16 significant bits: the precise query, which Gated KalmaNet needs, core/ops/cuda/gla.h); g and
// state_in f32; K and V of 64 or 128 (others are rejected).
// Returns o [B, T, H, V] in v's dtype, or in out_dtype: bf16 from f32 inputs on CUDA (a precise query's readout
// rounded once, as the kernel writes it). If state_out is non-null it receives S_T [B, H, K, V] (f32; f64 for f64).
// operands (CUDA, nullable): the members it defines are taken as the kernels' operands of these inputs (formed by
// their producers in their own passes: checked, a mismatch named), the rest are formed; on return it holds them all,
// for the backward. On the CPU it must be empty, and stays so.
struct GlaOperands;
Tensor gla(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, double scale, const Tensor& state_in,
           Tensor* state_out, std::optional<DType> out_dtype = std::nullopt, GlaOperands* operands = nullptr);

// What the CUDA kernels read: bf16 inputs as they are; of f32 inputs, k and v rounded to bf16 and q split into
// hi + lo bf16. Each is a pass over its input, so the forward hands them to the backward (ag::gla keeps them
// between the two) rather than forming them twice (in the precise GKA layer at B 4, T 4096, 16 heads of 128 on an
// H200 the backward's three passes took 0.15 ms), and the producers of f32 inputs may form them in the pass that
// writes the inputs (ops::ScaleHeadsOptions' bf16 split: GKA's β·k, β·v and q̃).
struct GlaOperands {
  Tensor q_hi, q_lo, k, v;                                                       // q_lo defined for an f32 query only
  bool defined() const { return q_hi.defined() && k.defined() && v.defined(); }  // a whole set
  bool empty() const { return !q_hi.defined() && !q_lo.defined() && !k.defined() && !v.defined(); }
};

struct GlaGrads {
  Tensor dq, dk, dv;  // like q, k, v
  Tensor dg;          // like g
  Tensor dstate_in;   // like state_in; defined iff state_in is
};
// Gradients of <dout, o> + <dstate_out, S_T> (dstate_out may be undefined: zero); dout in o's dtype. `operands`
// (nullable) as gla()'s: those it defines are used (checked) instead of forming them again.
GlaGrads gla_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                      double scale, const Tensor& state_in, const Tensor& dstate_out,
                      const GlaOperands* operands = nullptr);

namespace reference {
// The ground truth: the recurrence above token by token, f64 CPU tensors only, with a hand-written backward.
Tensor gla(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, double scale, const Tensor& state_in,
           Tensor* state_out);
GlaGrads gla_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                      double scale, const Tensor& state_in, const Tensor& dstate_out);
}  // namespace reference

}  // namespace primer::ops
