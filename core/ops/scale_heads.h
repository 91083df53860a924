// Heads scaled out of grouped heads, with an optional base: Mamba-2's value v = Δ·x and skip y + D·x, where x has
// the key/value heads (GQA) and the output every query head; GKA's β·k and β·v, and its mix q̃ = (1 − α)·q + α·x̂ —
// one pass each way instead of a head expansion, a broadcast product and a sum:
//   out[r, h, :] = base[r, h, :] + s[r, h] · x[r, h / G, :]                      (s per row and head, like Δ)
//   out[r, h, :] = base[r, h, :] + s[h] · x[r, h / G, :]                         (s per head, like D)
//   out[r, h, :] = base[r, h, :] + s · (x[r, h / G, :] − base[r, h, :])          (HeadBase::Lerp)
// for rows r (the leading dims), x's Hx heads, H = G·Hx output heads. Backward:
//   dx[r, j, :] = Σ_{h ∈ group j} s·dout[r, h, :],  ds = ⟨dout[r, h, :], x[r, h / G, :] (− base[r, h, :])⟩ (summed
//   over rows for s per head),  dbase = dout (Lerp: (1 − s)·dout).
// x in a float dtype (f32/f64 on the CPU, f32/bf16 on CUDA); base and the output in x's dtype, or f32 from a bf16
// x on CUDA (the head expansion, the cast and the scaling of GKA's precise mode in one pass); s in f32 (f64 beside
// f64), so a bf16 layer's Δ and D are not rounded to bf16 first. f32 math on CUDA, f64 on the CPU.
#pragma once
#include <optional>

#include "core/tensor.h"

namespace primer::ops {

// How base enters: added to the scaled heads, or mixed with them by s.
enum class HeadBase { Add, Lerp };

struct ScaleHeadsOptions {
  HeadBase base = HeadBase::Add;
  std::optional<DType> out_dtype;  // x's when unset
  // An f32 output on CUDA, split into bf16 halves in the same pass, for a consumer that would otherwise make that pass
  // itself (the GLA's operands, ops::GlaOperands): *bf16_hi_out receives the output rounded to bf16, *bf16_lo_out
  // (only beside bf16_hi_out) what that rounding left, rounded; hi + lo carries ~16 significant bits.
  Tensor* bf16_hi_out = nullptr;
  Tensor* bf16_lo_out = nullptr;
};

// x [..., Hx, D]; s [..., H] or [H]; base undefined (Add only) or [..., H, D]; heads = H, a multiple of Hx.
Tensor scale_heads(const Tensor& x, const Tensor& s, const Tensor& base, int64_t heads,
                   const ScaleHeadsOptions& options = {});

struct ScaleHeadsGrads {
  Tensor dx;     // like x
  Tensor ds;     // like s
  Tensor dbase;  // like lerp_base; defined iff it is (with HeadBase::Add dbase is dout itself)
};
// dout [..., H, D] in the output's dtype; x and s as given to the forward; lerp_base the base of a HeadBase::Lerp
// forward (undefined for Add). dx_addend (like x, or undefined) is added to dx in the same pass: a gradient x already
// holds from another use. dout_part (like dout, or undefined) is added to dout as it is read: the gradient the
// output received by a second path (GKA's k from the solve and the readout).
ScaleHeadsGrads scale_heads_backward(const Tensor& dout, const Tensor& x, const Tensor& s,
                                     const Tensor& dx_addend = Tensor(), const Tensor& lerp_base = Tensor(),
                                     const Tensor& dout_part = Tensor());

}  // namespace primer::ops
