#include "layers/gdn2_mixer.h"

#include <algorithm>
#include <cmath>

#include "core/autograd/functions.h"
#include "core/autograd/gated_delta_rule2.h"
#include "core/check.h"
#include "core/ops/gated_delta_rule2.h"
#include "layers/gdn_mixer.h"
#include "layers/kv_expansion.h"
#include "layers/ssm_blocks.h"

namespace primer::layers {
namespace {

constexpr const char* kConvs[] = {"q_conv1d", "k_conv1d", "v_conv1d"};
constexpr double kQkNormEps = 1e-6;  // x / sqrt(Σx² + 1e-6), as GDN and the authors' kernel

}  // namespace

Gdn2Mixer::Gdn2Mixer(const ModelConfig& c, const std::string& prefix, ParameterRegistry& params)
    : config_(c),
      gdn2_(c.gdn2),
      prefix_(prefix),
      params_(params),
      q_heads_(c.num_attention_heads),
      kv_heads_(c.num_key_value_heads),
      heads_(std::max(q_heads_, kv_heads_)),
      head_dim_(c.head_dim) {
  const std::array<int64_t, 3> channels = add_qkv_projections(params, prefix, c);
  const double std = c.initializer_range;
  const int64_t d = c.hidden_size, D = head_dim_, H = heads_;
  if (gdn2_.kda_gates) {
    params.add(prefix + ".b_proj.weight", {H, d}, InitRule::normal(std));
  } else {
    params.add(prefix + ".b_proj.weight", {H * D, d}, InitRule::normal(std));
    params.add(prefix + ".w_proj.weight", {H * D, d}, InitRule::normal(std));
  }
  params.add(prefix + ".f_proj.0.weight", {D, d}, InitRule::normal(std));
  params.add(prefix + ".f_proj.1.weight", {H * D, D}, InitRule::normal(std));
  // The authors' init: A = exp(A_log) ~ U(1, 16) per head; softplus(dt_bias) = dt log-uniform in [1e-3, 0.1] (floor
  // 1e-4) per key channel. f32 even under bf16, no weight decay.
  params.add(prefix + ".A_log", {H}, InitRule::log_uniform(1.0, 16.0), false).keep_f32 = true;
  params.add(prefix + ".dt_bias", {H * D}, InitRule::softplus_inverse_log_uniform(1e-3, 0.1, 1e-4), false).keep_f32 =
      true;
  if (gdn2_.use_short_conv)
    for (size_t i = 0; i < 3; ++i) {
      const std::string conv = prefix + "." + kConvs[i];
      params.add(conv + ".weight", {channels[i], 1, gdn2_.conv_size}, InitRule::normal(std));
      if (gdn2_.conv_bias) params.add(conv + ".bias", {channels[i]}, InitRule::constant(0.0));
    }
  if (gdn2_.use_gate) params.add(prefix + ".g_proj.weight", {H * D, d}, InitRule::normal(std));
  params.add(prefix + ".o_norm.weight", {D}, InitRule::constant(1.0), false);
  params.add(prefix + ".o_proj.weight", {d, H * D}, InitRule::normal(std));
}

ag::Var Gdn2Mixer::branch(const ag::Var& x, const char* name, int64_t heads, size_t slot, const StateCarry& carry) {
  const ag::Var y = ag::linear(x, weight(std::string(name) + "_proj.weight"));
  const std::string conv = kConvs[slot];
  const ag::Var w = gdn2_.use_short_conv ? weight(conv + ".weight") : nullptr;
  const ag::Var bias = gdn2_.use_short_conv && gdn2_.conv_bias ? weight(conv + ".bias") : nullptr;
  // q and k L2-normalised per head in their conv's pass.
  return conv_heads(y, w, bias, true, heads, head_dim_, slot, carry, slot < 2 ? kQkNormEps : -1);
}

ag::Var Gdn2Mixer::forward(const ag::Var& input, const MixerContext& ctx, const MixerState* state_in,
                           MixerState* state_out) {
  const StateCarry carry(ctx, state_in, state_out, gdn2_.use_short_conv ? 3 : 0, 1, prefix_,
                         {q_heads_, kv_heads_, false});
  const ag::Var x = carry.to_rows(input);
  const int64_t B = x->value.size(0), T = x->value.size(1), D = head_dim_, H = heads_;
  const int64_t local = carry.local_heads(H);  // the heads the core runs

  const ExpandedHeads heads = expand_qkv(branch(x, "q", q_heads_, 0, carry), branch(x, "k", kv_heads_, 1, carry),
                                         branch(x, "v", kv_heads_, 2, carry), local, -1, nullptr, nullptr);

  // The gates and the state are in A_log's dtype (f32; f64 in references), as the core's inputs except on CUDA
  // (below). The gates are
  // token-local: formed on this rank's tokens for every head, then moved with their heads under A2A.
  const ag::Var A_log = weight("A_log");
  const DType dt = A_log->value.dtype();
  const auto per_channel = [&](const ag::Var& y) { return ag::reshape(y, {B, T, H, D}); };
  const ag::Var low_rank = ag::linear(ag::linear(x, weight("f_proj.0.weight")), weight("f_proj.1.weight"));
  const ag::Var g = carry.to_heads(ag::ssm_decay(per_channel(low_rank), A_log, ag::reshape(weight("dt_bias"), {H, D})));
  ag::Var b, w;
  if (gdn2_.kda_gates) {
    // KDA: one β per head for both gates (doubled with allow_neg_eigval, as KDA does), repeated over the channels.
    ag::Var beta = ag::sigmoid_gate(ag::reshape(ag::linear(x, weight("b_proj.weight")), {B, T, H, 1}), nullptr);
    if (gdn2_.allow_neg_eigval) beta = ag::scale(beta, 2.0);
    b = w = carry.to_heads(ag::repeat_interleave(beta, 3, D));
  } else {
    b = ag::sigmoid_gate(per_channel(ag::linear(x, weight("b_proj.weight"))), nullptr);
    if (gdn2_.allow_neg_eigval) b = ag::scale(b, 2.0);  // only the erase gate: the spectrum of I − k(b⊙k)ᵀ
    b = carry.to_heads(b);
    w = carry.to_heads(ag::sigmoid_gate(per_channel(ag::linear(x, weight("w_proj.weight"))), nullptr));
  }

  // q, k, v in the chunked CUDA kernels' bf16 where they apply, else in the gates' dtype.
  const DType tokens = ops::gated_delta_rule2_token_dtype(x->value.device(), x->value.dtype(), D, D, dt);
  const ag::Var q = ag::cast(heads.q, tokens), k = ag::cast(heads.k, tokens);
  const double scale = 1.0 / std::sqrt(double(D));
  const auto core = [&](const ag::Var& values, const ag::Var& s0, ag::Var* s_out) {
    return ag::gated_delta_rule2(q, k, values, g, b, w, scale, s0, s_out);
  };
  const ag::Var o =
      carry.from_heads(ag::cast(linear_state_output(core, ag::cast(heads.v, tokens), carry, 0), x->value.dtype()));

  const ag::Var g_proj = gdn2_.use_gate ? weight("g_proj.weight") : nullptr;
  return carry.from_rows(norm_gate_project(o, x, weight("o_norm.weight"), g_proj ? &g_proj : nullptr,
                                           weight("o_proj.weight"), gdn2_.norm_eps));
}

double Gdn2Mixer::flops_per_token(int64_t /*seq_len*/) const {
  const double d = double(config_.hidden_size), D = double(head_dim_), H = double(heads_);
  const double qkv = double(q_heads_ + 2 * kv_heads_) * D;
  // q, k, v, the erase and write gates (KDA: one per head), the low-rank decay, the output gate and o_proj.
  const double gates = gdn2_.kda_gates ? H : 2 * H * D;
  const double projections = 2.0 * d * (qkv + gates + D + (gdn2_.use_gate ? H * D : 0) + H * D) + 2.0 * D * H * D;
  const double conv = gdn2_.use_short_conv ? 2.0 * double(gdn2_.conv_size) * qkv : 0;
  // The chunked core has GDN's (and KDA's) product shapes; the gates add elementwise work only.
  return projections + conv + H * GdnMixer::core_forward_flops(head_dim_, head_dim_);
}

}  // namespace primer::layers
