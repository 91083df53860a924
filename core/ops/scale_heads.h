// Heads scaled out of grouped heads, with an optional addend: Mamba-2's value v = Δ·x and skip y + D·x, where x has
// the key/value heads (GQA) and the output every query head, in one pass each way instead of a head expansion, a
// broadcast product and a sum:
//   out[r, h, :] = base[r, h, :] + s[r, h] · x[r, h / G, :]   (s per row and head, like Δ)
//   out[r, h, :] = base[r, h, :] + s[h] · x[r, h / G, :]      (s per head, like D)
// for rows r (the leading dims), x's Hx heads, H = G·Hx output heads. Backward:
//   dx[r, j, :] = Σ_{h ∈ group j} s·dout[r, h, :],  ds = ⟨dout[r, h, :], x[r, h / G, :]⟩ (summed over rows for s per
//   head),  dbase = dout.
// x and base in one float dtype (f32/f64 on the CPU, f32/bf16 on CUDA); s in f32 (f64 beside f64), so a bf16 layer's
// Δ and D are not rounded to bf16 first. f32 math on CUDA, f64 on the CPU.
#pragma once
#include "core/tensor.h"

namespace primer::ops {

// x [..., Hx, D]; s [..., H] or [H]; base undefined or [..., H, D]; heads = H, a multiple of Hx.
Tensor scale_heads(const Tensor& x, const Tensor& s, const Tensor& base, int64_t heads);

struct ScaleHeadsGrads {
  Tensor dx;  // like x
  Tensor ds;  // like s
};
// dout [..., H, D] (x's dtype); x and s as given to the forward (dbase is dout itself). dx_addend (like x, or
// undefined) is added to dx in the same pass: a gradient x already holds from another use.
ScaleHeadsGrads scale_heads_backward(const Tensor& dout, const Tensor& x, const Tensor& s,
                                     const Tensor& dx_addend = Tensor());

}  // namespace primer::ops
