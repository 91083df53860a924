#include "layers/kv_expansion.h"

#include "core/autograd/functions.h"
#include "core/check.h"
#include "layers/ssm_blocks.h"

namespace primer::layers {

KvExpansion::KvExpansion(const std::string& prefix, const std::string& which, int64_t rank, int64_t kv_heads,
                         int64_t heads, int64_t head_dim, bool learnable_residual, double init_std,
                         ParameterRegistry& params)
    : a_name_(prefix + ".proj_" + which + ".linearA.weight"),
      b_name_(prefix + ".proj_" + which + ".linearB.weight"),
      kv_heads_(kv_heads),
      heads_(heads),
      head_dim_(head_dim),
      params_(params) {
  PRIMER_CHECK(rank > 0 && heads % kv_heads == 0, "{}: Adaptive GQA needs rank > 0 and H ({}) a multiple of Hk ({})",
               prefix, heads, kv_heads);
  params.add(a_name_, {rank, kv_heads * head_dim}, InitRule::normal(init_std));
  params.add(b_name_, {heads * head_dim, rank}, InitRule::constant(0.0));  // starts as plain GQA
  if (learnable_residual) {
    rep_name_ = prefix + "." + which + "_rep";
    params.add(rep_name_, {heads, kv_heads}, InitRule::gqa_replication(heads / kv_heads), false);
  }
}

ag::Var KvExpansion::forward(const ag::Var& x) {
  const int64_t B = x->value.size(0), T = x->value.size(1);
  const ag::Var flat = ag::reshape(x, {B, T, kv_heads_ * head_dim_});
  const ag::Var hidden = ag::unary(ops::Unary::Silu, ag::linear(flat, params_.get(a_name_).var));
  const ag::Var low_rank = ag::reshape(ag::linear(hidden, params_.get(b_name_).var), {B, T, heads_, head_dim_});
  if (rep_name_.empty()) return ag::add(low_rank, expand_heads(x, heads_ / kv_heads_));
  // R · X over the head axis: heads last, a linear map [Hk] → [H], heads back in place.
  const ag::Var heads_last = ag::transpose(x, 2, 3);                         // [B, T, D, Hk]
  const ag::Var mixed = ag::linear(heads_last, params_.get(rep_name_).var);  // [B, T, D, H]
  return ag::add(low_rank, ag::transpose(mixed, 2, 3));
}

ExpandedHeads expand_qkv(const ag::Var& q, const ag::Var& k, const ag::Var& v, int64_t heads, double l2_eps,
                         KvExpansion* k_expansion, KvExpansion* v_expansion, bool normalize_keys,
                         const ag::Var* kv_scale, std::optional<DType> out_dtype, bool kv_bf16) {
  const DType dtype = out_dtype.value_or(q->value.dtype());
  PRIMER_CHECK(!kv_bf16 || (kv_scale && dtype == DType::F32 && q->value.is_cuda()),
               "expand_qkv: k and v rounded to bf16 in their scaling pass need a kv_scale, an f32 out_dtype and CUDA "
               "inputs; got {}, {} and {}",
               kv_scale ? "a scale" : "no scale", dtype_name(dtype), q->value.describe());
  auto cast = [&](const ag::Var& x) { return x->value.dtype() == dtype ? x : ag::cast(x, dtype); };
  PRIMER_CHECK(l2_eps >= 0 || !k_expansion,
               "expand_qkv: Adaptive GQA's keys are normalised after their expansion, "
               "here (l2_eps ≥ 0), not in their conv's pass");
  const bool normed = l2_eps < 0;  // q and k arrive L2-normalised (their short convs' pass)
  ExpandedHeads out;
  out.q = cast(expand_heads(normed ? q : l2_normalize(q, l2_eps), heads / q->value.size(2)));
  auto key_norm = [&](const ag::Var& x) { return normalize_keys && !normed ? l2_normalize(x, l2_eps) : x; };
  // x's heads (Hk, or already H after an expansion) repeated to H, and scaled and cast in the same pass when asked.
  auto spread = [&](const ag::Var& x, Tensor& rounded) {
    return kv_scale ? ag::scale_heads(x, *kv_scale, nullptr, heads,
                                      {.out_dtype = dtype, .bf16_hi_out = kv_bf16 ? &rounded : nullptr})
                    : cast(expand_heads(x, heads / x->value.size(2)));
  };
  out.k = spread(k_expansion ? key_norm(k_expansion->forward(k)) : key_norm(k), out.k_bf16);
  out.v = spread(v_expansion ? v_expansion->forward(v) : v, out.v_bf16);
  return out;
}

}  // namespace primer::layers
