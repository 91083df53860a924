#include "layers/kla_mixer.h"

#include <algorithm>
#include <cmath>

#include "core/autograd/functions.h"
#include "core/autograd/kalman_scan.h"
#include "core/check.h"
#include "layers/kv_expansion.h"
#include "layers/ssm_blocks.h"

namespace primer::layers {
namespace {

constexpr const char* kConvs[] = {"q_conv1d", "k_conv1d", "v_conv1d"};
constexpr double kQkNormEps = 1e-6;
constexpr double kMinStep = 1e-7;  // Δ = softplus(delta) + 1e-7, as the authors' code

ag::Var constant_like(double value, const ag::Var& like) {
  return ag::constant(Tensor::full({1}, value, like->value.dtype(), like->value.device()));
}

}  // namespace

KlaMixer::KlaMixer(const ModelConfig& c, const std::string& prefix, ParameterRegistry& params)
    : config_(c),
      kla_(c.kla),
      prefix_(prefix),
      params_(params),
      q_heads_(c.num_attention_heads),
      kv_heads_(c.num_key_value_heads),
      heads_(std::max(q_heads_, kv_heads_)),
      head_dim_(c.head_dim) {
  const std::array<int64_t, 3> channels = add_qkv_projections(params, prefix, c);
  const double std = c.initializer_range;
  const int64_t d = c.hidden_size, D = head_dim_, H = heads_;
  params.add(prefix + ".lv_proj.weight", {H * D, d}, InitRule::normal(std));
  // The authors' init: a = exp(lambda_log) = 1, Δ log-uniform in [1e-3, 0.1] (floored at 1e-4) through softplus⁻¹,
  // p = process_noise_init, kept in log form as a is (p > 0 without the authors' clamp, whose gradient vanishes where
  // it binds); f32 even under bf16, no weight decay.
  params.add(prefix + ".lambda_log", {H, D, D}, InitRule::constant(0.0), false).keep_f32 = true;
  params.add(prefix + ".delta", {H, D, D}, InitRule::softplus_inverse_log_uniform(1e-3, 0.1, 1e-4), false).keep_f32 =
      true;
  params.add(prefix + ".process_noise_log", {H, D, D}, InitRule::constant(std::log(kla_.process_noise_init)), false)
      .keep_f32 = true;
  if (kla_.use_short_conv)
    for (size_t i = 0; i < 3; ++i)
      params.add(prefix + "." + kConvs[i] + ".weight", {channels[i], 1, kla_.conv_size}, InitRule::normal(std));
  if (kla_.use_gate) params.add(prefix + ".g_proj.weight", {H * D, d}, InitRule::normal(std));
  params.add(prefix + ".o_norm.weight", {D}, InitRule::constant(1.0), false);
  params.add(prefix + ".o_proj.weight", {d, H * D}, InitRule::normal(std));
}

ag::Var KlaMixer::branch(const ag::Var& x, const char* name, int64_t heads, size_t slot, const StateCarry& carry) {
  const ag::Var y = ag::linear(x, weight(std::string(name) + "_proj.weight"));
  const ag::Var w = kla_.use_short_conv ? weight(std::string(kConvs[slot]) + ".weight") : nullptr;
  // q and k L2-normalised per head in their conv's pass.
  return conv_heads(y, w, nullptr, true, heads, head_dim_, slot, carry, slot < 2 ? kQkNormEps : -1);
}

ag::Var KlaMixer::forward(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in,
                          MixerState* state_out) {
  const int64_t B = x->value.size(0), T = x->value.size(1), H = heads_, D = head_dim_;
  // The filter's precision scan is a Möbius map, not affine in the state: no P2P (the decoder runs KLA by USP).
  const StateCarry carry(ctx, state_in, state_out, kla_.use_short_conv ? 3 : 0, 2, prefix_);
  const ExpandedHeads heads = expand_qkv(branch(x, "q", q_heads_, 0, carry), branch(x, "k", kv_heads_, 1, carry),
                                         branch(x, "v", kv_heads_, 2, carry), H, -1, nullptr, nullptr);

  // The filter computes in the dynamics' dtype (f32; f64 in references): precisions span decades.
  const ag::Var lambda_log = weight("lambda_log");
  const DType dt = lambda_log->value.dtype();
  const ag::Var precision = ag::add(
      ag::unary(ops::Unary::Softplus, ag::cast(ag::reshape(ag::linear(x, weight("lv_proj.weight")), {B, T, H, D}), dt)),
      constant_like(kla_.min_precision, lambda_log));
  // ā = exp(−aΔ), p̄ = p²(1 − ā²)/(2a) with a = exp(lambda_log), Δ = softplus(delta) + 1e-7: the exact OU
  // discretisation with p the diffusion σ (the paper's Eq. 8).
  const ag::Var step = ag::add(ag::unary(ops::Unary::Softplus, weight("delta")), constant_like(kMinStep, lambda_log));
  const ag::Var a_bar =
      ag::unary(ops::Unary::Exp, ag::scale(ag::mul(ag::unary(ops::Unary::Exp, lambda_log), step), -1.0));
  const ag::Var one_minus_a2 =
      ag::add(constant_like(1.0, lambda_log), ag::scale(ag::unary(ops::Unary::Square, a_bar), -1.0));
  // p²/(2a) = exp(2·process_noise_log − lambda_log)/2.
  const ag::Var p2_over_2a = ag::scale(
      ag::unary(ops::Unary::Exp, ag::add(ag::scale(weight("process_noise_log"), 2.0), ag::scale(lambda_log, -1.0))),
      0.5);
  const ag::Var p_bar = ag::mul(p2_over_2a, one_minus_a2);

  const ag::KalmanScanResult y =
      ag::kalman_scan(ag::cast(heads.q, dt), ag::cast(heads.k, dt), ag::cast(heads.v, dt), precision, a_bar, p_bar,
                      carry.recurrent_in(0, nullptr), carry.recurrent_in(1, nullptr), false, carry.recurrent_out(0),
                      carry.recurrent_out(1));

  const ag::Var g_proj = kla_.use_gate ? weight("g_proj.weight") : nullptr;
  return norm_gate_project(ag::cast(y.y, x->value.dtype()), x, weight("o_norm.weight"), g_proj ? &g_proj : nullptr,
                           weight("o_proj.weight"), kla_.norm_eps);
}

double KlaMixer::flops_per_token(int64_t /*seq_len*/) const {
  const double d = double(config_.hidden_size), D = double(head_dim_), H = double(heads_);
  const double qkv = double(q_heads_ + 2 * kv_heads_) * D;
  const double projections = 2.0 * d * (qkv + H * D + (kla_.use_gate ? H * D : 0) + H * D);
  const double conv = kla_.use_short_conv ? 2.0 * double(kla_.conv_size) * qkv : 0;
  // Per state element and token: φ, b, ρ, λ, η (about 10 operations) and the readout q·η/λ (3).
  return projections + conv + 13.0 * H * D * D;
}

}  // namespace primer::layers
