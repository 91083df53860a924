// Adaptive GQA ("AGQA", Priming §3.2.3): the expansion of a layer's Hk key or value heads to its H mixer heads
//   F(X) = mat(W2 · SiLU(W1 · vec(X))) + R · X,        X [Hk, D] per token
// with a low-rank branch W1 [rank, Hk·D], W2 [H·D, rank] (zero-initialised) and a residual R [H, Hk] initialised as
// the GQA replication I_Hk ⊗ 1_{G×1} (fixed, or learnable), so that at Stage 0 it is exactly plain GQA. Names as
// the reference: <prefix>.proj_<k|v>.linearA.weight, .linearB.weight and <prefix>.<k|v>_rep.
#pragma once
#include <optional>
#include <string>

#include "core/parameters.h"

namespace primer::layers {

class KvExpansion {
 public:
  // which: "k" or "v"; heads: H (the mixer's), kv_heads: Hk, learnable_residual: R is a parameter.
  KvExpansion(const std::string& prefix, const std::string& which, int64_t rank, int64_t kv_heads, int64_t heads,
              int64_t head_dim, bool learnable_residual, double init_std, ParameterRegistry& params);
  // x [B, T, Hk, D] → [B, T, H, D].
  ag::Var forward(const ag::Var& x);

 private:
  std::string a_name_, b_name_, rep_name_;  // rep_name_ empty: fixed replication
  int64_t kv_heads_, heads_, head_dim_;
  ParameterRegistry& params_;
};

// The heads of GKA, GDN-2 and KLA: q [B, T, Hq, D], k and v [B, T, Hk, D] → H heads each, q and k L2-normalised
// (l2_eps inside the root; l2_eps < 0: they arrive normalised, by their short convs' pass). k and v are repeated (plain
// GQA, which commutes with the norm) or, when expansions are given, go through Adaptive GQA before k's norm, as the
// reference does. normalize_keys false leaves k raw (KZLA). With kv_scale ([B, T, H], f32: GKA's β) k and v leave
// scaled per row and head, in the pass that repeats their heads. out_dtype (f32 from bf16: GKA's precise mode) casts
// the three; k and v in that same pass when scaled, which with kv_bf16 (CUDA) also writes them rounded to bf16: the
// GLA's operands (ops::GlaOperands), formed where k and v are.
struct ExpandedHeads {
  ag::Var q, k, v;
  Tensor k_bf16, v_bf16;  // defined iff kv_bf16 was asked
};
ExpandedHeads expand_qkv(const ag::Var& q, const ag::Var& k, const ag::Var& v, int64_t heads, double l2_eps,
                         KvExpansion* k_expansion, KvExpansion* v_expansion, bool normalize_keys = true,
                         const ag::Var* kv_scale = nullptr, std::optional<DType> out_dtype = std::nullopt,
                         bool kv_bf16 = false);

}  // namespace primer::layers
