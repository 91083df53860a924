// Softmax attention of one set of query rows over the union of two key sets, each with its own queries, keys,
// values and mask (B'MOJO-F: a window over the tokens themselves and one over an SSM's outputs further back), as one
// softmax (ops::merged_attention: one fused kernel each way on Hopper, else two flash attentions merged by their
// log-sum-exps).
#pragma once
#include "core/autograd/variable.h"
#include "core/ops/attention.h"

namespace primer::ag {

struct AttentionPart {
  Var q, k, v;  // q [B, T, Hq, Dh], k/v [B, Tk, Hkv, Dh] (GQA); q may be the other part's
  ops::AttentionOptions options;
};

// out [B, T, Hq, Dh]: row i is Σ_j p_ij v_j over the visible keys of both parts with one softmax,
// p_ij = exp(s_ij − lse_i), lse_i = log Σ_j exp(s_ij) over both. Every row must see a key of part a (lse_a finite);
// part b may see none. Both parts must use the same scale for the merge to be one softmax.
// The backward is each part's attention backward given the merged out and lse, which is exact:
// ∂L/∂s_ij = p_ij (dout_i·v_j − dout_i·out_i) for either part's keys (as the B'MOJO-F reference does it).
// Parts whose q is the same Var share their queries: one query operand, one dq.
Var merged_attention(const AttentionPart& a, const AttentionPart& b);

}  // namespace primer::ag
