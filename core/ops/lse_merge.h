// Two softmax attentions of the same queries over disjoint key sets, merged into the attention over their union by
// their log-sum-exps (B'MOJO-F's in-context and fading paths; ring attention's blocks).
#pragma once
#include "core/tensor.h"

namespace primer::ops {

// out_a, out_b [B, T, H, Dh] (one dtype), lse_a, lse_b [B, H, T] (f32, or f64) as ops::attention returns them:
//   lse = log(e^{lse_a} + e^{lse_b}),   out = e^{lse_a − lse}·out_a + e^{lse_b − lse}·out_b
// computed as lse = lse_a + softplus(d) with weights sigmoid(−d), sigmoid(d), d = lse_b − lse_a, which never
// overflows. lse_a must be finite on every row (part a sees a key on every row); lse_b may be −inf where part b sees
// no key (its output row, 0, then drops out). Returns out in out_a's dtype (arithmetic in the lse's dtype) and, if
// lse_out is given, the merged lse. Any device; inputs may be views.
Tensor lse_merge(const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b, const Tensor& lse_b, Tensor* lse_out);

namespace reference {
// The same in f64 on the CPU, row by row as the B'MOJO-F reference writes it (max-shifted exponentials; a row with
// both lse −inf merges to out 0, lse −inf).
Tensor lse_merge(const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b, const Tensor& lse_b, Tensor* lse_out);
}  // namespace reference

}  // namespace primer::ops
