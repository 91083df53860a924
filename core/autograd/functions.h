// Differentiable ops: each forwards to core/ops and records one node whose backward calls the op's
// hand-written backward. Weight-like inputs (W, norm weights, conv taps, embedding tables) receive their
// gradients through grad_accumulator(), so parameter gradients land in place in their f32 buffers.
#pragma once
#include "core/autograd/variable.h"
#include "core/ops/attention.h"
#include "core/ops/elementwise.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/scale_heads.h"

namespace primer::ag {

Var add(const Var& a, const Var& b);  // broadcasting
Var mul(const Var& a, const Var& b);  // broadcasting
Var scale(const Var& a, double s);
// Each slice of x along `dim` repeated `repeats` times in place (GQA's head expansion: heads h -> h·r ... h·r + r-1).
Var repeat_interleave(const Var& x, int dim, int64_t repeats);
// ops::scale_heads: base + s · (x's heads, each repeated for its group of heads), or base + s · (x's − base) with
// HeadBase::Lerp; base may be null (Add), s per row and head [..., heads] or per head [heads] (Mamba-2's Δ·x and
// y + D·x under GQA, GKA's β·k and its q̃), the output in x's dtype or options.out_dtype.
Var scale_heads(const Var& x, const Var& s, const Var& base, int64_t heads, const ops::ScaleHeadsOptions& options = {});
// ops::ssm_decay: g = −exp(A_log)·softplus(a + dt_bias) in A_log's dtype; *delta (if non-null) receives the step
// softplus(a + dt_bias), whose gradient joins g's in the one backward.
Var ssm_decay(const Var& a, const Var& A_log, const Var& dt_bias, Var* delta = nullptr);
// ops::sigmoid_gate: sigmoid(a + bias) + offset in f32 (f64 beside f64); bias may be null.
Var sigmoid_gate(const Var& a, const Var& bias, double offset = 0.0);
Var unary(ops::Unary op, const Var& x);
Var reshape(const Var& x, const Shape& shape);
Var transpose(const Var& x, int d0, int d1);  // materialised (contiguous) result
Var cast(const Var& x, DType dtype);          // gradient cast back to x's dtype
Var sum(const Var& x, int dim);               // over one dimension (dropped); negative counts from the end

Var linear(const Var& x, const Var& W);  // y = x @ W^T, W [out, in]
// linear whose output is kept across a checkpointed block's recompute (ag::kept_across_recompute): for the projections
// back into the residual stream (attention's and the SSM mixers' o_proj, the MLP's down_proj), which a recompute would
// run only to form values it then adds to the stream or discards, for [hidden] values a token.
Var linear_kept(const Var& x, const Var& W);
// y = x @ W[begin:end]^T: one row block of a fused projection (its gradient lands in those rows of W's), instead of
// the whole product split into copies.
Var linear_rows(const Var& x, const Var& W, int64_t begin, int64_t end);
// Narrow projections of one input as one GEMM: y_i = x @ W_i^T for weights of a few rows each (GDN's decay and β,
// GKA's decay, β and α: one value per head), which as separate GEMMs would each read all of x and each write a
// whole dx. The weights are joined per call (a copy of a few rows) and the outputs cut apart (a few columns).
std::vector<Var> linear_joined(const Var& x, const std::vector<Var>& weights);
Var matmul(const Var& a, const Var& b);  // batched: a [N, M, K] @ b [N, K, P] → [N, M, P], one dtype
Var rmsnorm(const Var& x, const Var& w, double eps);
// The gated and L2 variants of ops::rmsnorm, one node: w null for a unit weight, [D] or per-head [G, D]; gate z null
// unless spec.gate != None.
Var rmsnorm(const Var& x, const Var& w, const Var& z, const ops::NormSpec& spec);
Var rope(const Var& x, const Tensor& positions, const Tensor& inv_freq);
// rope(rmsnorm(x, w, eps)) as one node (ops/rmsnorm_rope.h: Qwen3's q and k heads, one pass each way on CUDA).
Var rmsnorm_rope(const Var& x, const Var& w, double eps, const Tensor& positions, const Tensor& inv_freq);
Var swiglu(const Var& gate, const Var& up);
Var embedding(const Var& weight, const Tensor& ids);
Var causal_conv1d(const Var& x, const Var& w, const Var& bias, bool silu);
// With a carried state (see ops::causal_conv1d): state_in [B, C, K-1] (null Var: zeros) and, if state_out is
// non-null, the last K-1 inputs after x. Gradients flow into state_in and out of *state_out.
Var causal_conv1d(const Var& x, const Var& w, const Var& bias, bool silu, const Var& state_in, Var* state_out);
// The same, then each head of head_dim output channels L2-normalised per token (ops::causal_conv1d_l2: in the conv's
// pass on CUDA). The backward takes the norm's gradient from its output, then the conv's.
Var causal_conv1d_l2(const Var& x, const Var& w, const Var& bias, bool silu, const Var& state_in, Var* state_out,
                     int64_t head_dim, double eps);
// One causal conv over channels held as separate parts x_i [B, T, C_i] (Mamba-2's x | B | C), none joined and no
// output split: part i runs with rows [o_i, o_i + C_i) of w [ΣC_i, K] and bias, and with those channels of the one
// state [B, ΣC_i, K-1] (state_in null: zeros; *state_out, if non-null, receives the parts' final states joined).
// The weight and bias gradients land in the rows of one accumulator each.
std::vector<Var> causal_conv1d_parts(const std::vector<Var>& parts, const Var& w, const Var& bias, bool silu,
                                     const Var& state_in, Var* state_out);
Var softmax(const Var& x);
// Flash attention: q [B, T, Hq, Dh], k/v [B, T, Hkv, Dh] (GQA); saves out and the log-sum-exp for backward.
Var attention(const Var& q, const Var& k, const Var& v, const ops::AttentionOptions& options);

// Mean squared error over every element, mean((a − target)²), a scalar [1] (f32; f64 for f64 a); the target is a
// constant (a teacher's output). Gradient 2(a − target)/N into a.
Var mse_loss(const Var& a, const Tensor& target);

// Sum of token cross-entropies of the LM head; its gradients (scaled by grad_scale) are computed during this
// forward call, which is what fusing buys: the caller must use the result as the objective, seeded with 1.
Var fused_linear_cross_entropy(const Var& x, const Var& W, const Tensor& targets, int64_t ignore_index,
                               double grad_scale);

}  // namespace primer::ag
