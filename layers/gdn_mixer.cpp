#include "layers/gdn_mixer.h"

#include <algorithm>
#include <cmath>

#include "core/autograd/functions.h"
#include "core/autograd/gated_delta_rule.h"
#include "core/autograd/kaczmarz_delta_rule.h"
#include "core/check.h"
#include "layers/ssm_blocks.h"

namespace primer::layers {
namespace {

constexpr const char* kConvs[] = {"q_conv1d", "k_conv1d", "v_conv1d"};
constexpr double kQkNormEps = 1e-6;    // fla's in-kernel L2 norm: x / sqrt(Σx² + 1e-6)
constexpr double kKaczmarzEps = 1e-6;  // β = η/(‖k‖² + ε): the paper's ε
constexpr int64_t kChunk = 64;         // the chunk length of the gated delta rule kernels (for the FLOP count)

}  // namespace

GdnMixer::GdnMixer(const ModelConfig& c, const std::string& prefix, ParameterRegistry& params, DeltaStep step)
    : config_(c),
      step_(step),
      gdn_(step == DeltaStep::Kaczmarz ? c.kzla : c.gdn),
      prefix_(prefix),
      params_(params),
      q_heads_(c.num_attention_heads),
      kv_heads_(c.num_key_value_heads),
      heads_(std::max(q_heads_, kv_heads_)),
      head_dim_(c.head_dim) {
  const std::array<int64_t, 3> channels = add_qkv_projections(params, prefix, c);
  const double std = c.initializer_range;
  const int64_t d = c.hidden_size, D = head_dim_, H = heads_;
  params.add(prefix + ".b_proj.weight", {H, d}, InitRule::normal(std));
  params.add(prefix + ".gk_proj.weight", {H, d}, InitRule::normal(std));
  // A = exp(A_log) ~ U(0, 16) (the reference's log(U(0, 16))); the low end only keeps the log finite.
  params.add(prefix + ".A_log", {H}, InitRule::log_uniform(1e-4, 16.0), false).keep_f32 = true;
  params.add(prefix + ".dt_bias", {H}, InitRule::softplus_inverse_log_uniform(1e-3, 0.1, 1e-4), false).keep_f32 = true;
  if (gdn_.use_short_conv)
    for (size_t i = 0; i < 3; ++i) {
      const std::string conv = prefix + "." + kConvs[i];
      params.add(conv + ".weight", {channels[i], 1, gdn_.conv_size}, InitRule::normal(std));
      if (gdn_.conv_bias) params.add(conv + ".bias", {channels[i]}, InitRule::constant(0.0));
    }
  if (gdn_.use_gate) params.add(prefix + ".g_proj.weight", {H * D, d}, InitRule::normal(std));
  params.add(prefix + ".o_norm.weight", {D}, InitRule::constant(1.0), false);
  params.add(prefix + ".o_proj.weight", {d, H * D}, InitRule::normal(std));
  if (gdn_.kv_proj_rank) {
    k_expansion_.emplace(prefix, "k", *gdn_.kv_proj_rank, kv_heads_, H, D, gdn_.kv_learnable_residual, std, params);
    v_expansion_.emplace(prefix, "v", *gdn_.kv_proj_rank, kv_heads_, H, D, gdn_.kv_learnable_residual, std, params);
  }
}

ag::Var GdnMixer::branch(const ag::Var& x, const char* name, int64_t heads, size_t slot, const StateCarry& carry,
                         bool l2_normalized) {
  const ag::Var y = ag::linear(x, weight(std::string(name) + "_proj.weight"));
  const std::string conv = kConvs[slot];
  const ag::Var w = gdn_.use_short_conv ? weight(conv + ".weight") : nullptr;
  const ag::Var bias = gdn_.use_short_conv && gdn_.conv_bias ? weight(conv + ".bias") : nullptr;
  return conv_heads(y, w, bias, true, heads, head_dim_, slot, carry, l2_normalized ? kQkNormEps : -1);
}

ag::Var GdnMixer::forward(const ag::Var& input, const MixerContext& ctx, const MixerState* state_in,
                          MixerState* state_out) {
  const StateCarry carry(ctx, state_in, state_out, gdn_.use_short_conv ? 3 : 0, 1, prefix_,
                         {q_heads_, kv_heads_, k_expansion_.has_value()});
  const ag::Var x = carry.to_rows(input);
  const int64_t H = carry.local_heads(heads_), D = head_dim_;  // the heads the core runs

  // q and k L2-normalised (KZLA's k stays raw) in their short convs' pass; k after Adaptive GQA where that expands
  // it. q is repeated where it has fewer heads than k; k and v stay at theirs (GQA): the core reads each for its
  // group's heads.
  const bool normalize_keys = step_ == DeltaStep::Gated;
  const ag::Var q_heads = branch(x, "q", q_heads_, 0, carry, true);
  const ag::Var q = expand_heads(q_heads, H / q_heads->value.size(2));
  ag::Var k = branch(x, "k", kv_heads_, 1, carry, normalize_keys && !k_expansion_);
  if (k_expansion_) k = normalize_keys ? l2_normalize(k_expansion_->forward(k), kQkNormEps) : k_expansion_->forward(k);
  ag::Var v = branch(x, "v", kv_heads_, 2, carry, false);
  if (v_expansion_) v = v_expansion_->forward(v);

  // The gates in f32 (f64 in references), A_log's dtype, as the op takes them.
  // The gates are token-local: formed on this rank's tokens, then moved with their heads under A2A.
  // The decay's and β's projections (a value per head each) as one GEMM.
  const std::vector<ag::Var> narrow = ag::linear_joined(x, {weight("gk_proj.weight"), weight("b_proj.weight")});
  const ag::Var g = carry.to_heads(ag::ssm_decay(narrow[0], weight("A_log"), weight("dt_bias")));
  // GDN's β, or KZLA's η (its β = η/(‖k‖² + ε) is formed inside the core).
  ag::Var beta = ag::sigmoid_gate(narrow[1], nullptr);
  if (gdn_.allow_neg_eigval) beta = ag::scale(beta, 2.0);
  beta = carry.to_heads(beta);

  const double scale = 1.0 / std::sqrt(double(D));
  const auto core = [&](const ag::Var& values, const ag::Var& s0, ag::Var* s_out) {
    return step_ == DeltaStep::Kaczmarz ? ag::kaczmarz_delta_rule(q, k, values, g, beta, scale, kKaczmarzEps, s0, s_out)
                                        : ag::gated_delta_rule(q, k, values, g, beta, scale, s0, s_out);
  };
  const ag::Var o = carry.from_heads(linear_state_output(core, v, carry, 0));

  const ag::Var g_proj = gdn_.use_gate ? weight("g_proj.weight") : nullptr;
  return carry.from_rows(norm_gate_project(o, x, weight("o_norm.weight"), g_proj ? &g_proj : nullptr,
                                           weight("o_proj.weight"), gdn_.norm_eps));
}

double GdnMixer::core_forward_flops(int64_t key_dim, int64_t value_dim) {
  // Per chunk of C tokens: K Kᵀ, Q Kᵀ, W = A·(βγK), u = A·(βV), (QKᵀ⊙D)·U: 2C(3K + 2V) per token; U = u − W S,
  // Q S and the state update: 6KV per token.
  const double K = double(key_dim), V = double(value_dim), C = double(kChunk);
  return 2 * C * (3 * K + 2 * V) + 6 * K * V;
}

double GdnMixer::core_backward_flops(int64_t key_dim, int64_t value_dim) {
  // Recompute (K Kᵀ, Q Kᵀ, W, u: 2C(3K + V); states: 4KV), the reverse state pass (2CV + 6KV) and the per-chunk
  // gradients (14CK + 6CV + 6KV + 4C²).
  const double K = double(key_dim), V = double(value_dim), C = double(kChunk);
  return 2 * C * (10 * K + 5 * V) + 16 * K * V + 4 * C * C;
}

double GdnMixer::flops_per_token(int64_t /*seq_len*/) const {
  const double d = double(config_.hidden_size), D = double(head_dim_), H = double(heads_);
  const double qkv = double(q_heads_ + 2 * kv_heads_) * D;
  const double projections = 2.0 * d * (qkv + 2 * H + (gdn_.use_gate ? H * D : 0) + H * D);
  const double conv = gdn_.use_short_conv ? 2.0 * double(gdn_.conv_size) * qkv : 0;
  return projections + conv + H * core_forward_flops(head_dim_, head_dim_);
}

}  // namespace primer::layers
