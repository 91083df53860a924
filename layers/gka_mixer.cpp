#include "layers/gka_mixer.h"

#include <algorithm>
#include <cmath>

#include "core/autograd/chebyshev_solve.h"
#include "core/autograd/functions.h"
#include "core/autograd/gla.h"
#include "core/check.h"
#include "layers/ssm_blocks.h"

namespace primer::layers {
namespace {

constexpr const char* kConvs[] = {"q_conv1d", "k_conv1d", "v_conv1d"};
constexpr double kL2Eps = 1e-12;     // x / sqrt(Σx² + 1e-12) for the reference's x / (‖x‖ + 1e-6): see the header
constexpr double kBetaFloor = 1e-6;  // k and v are scaled by β + 1e-6
constexpr int64_t kChunk = 64;       // the chunk length of the solve and readout kernels (for the FLOP count)

}  // namespace

GkaMixer::GkaMixer(const ModelConfig& c, const std::string& prefix, ParameterRegistry& params)
    : config_(c),
      gka_(c.gka),
      prefix_(prefix),
      params_(params),
      q_heads_(c.num_attention_heads),
      kv_heads_(c.num_key_value_heads),
      heads_(std::max(q_heads_, kv_heads_)),
      head_dim_(c.head_dim) {
  PRIMER_CHECK(heads_ % q_heads_ == 0 && heads_ % kv_heads_ == 0,
               "{}: num_attention_heads {} and num_key_value_heads {} must divide the larger of the two", prefix,
               q_heads_, kv_heads_);
  set_num_iter(gka_.num_iter);
  const double std = c.initializer_range;
  const int64_t d = c.hidden_size, D = head_dim_, H = heads_;
  const int64_t channels[] = {q_heads_ * D, kv_heads_ * D, kv_heads_ * D};
  params.add(prefix + ".q_proj.weight", {channels[0], d}, InitRule::normal(std));
  params.add(prefix + ".k_proj.weight", {channels[1], d}, InitRule::normal(std));
  params.add(prefix + ".v_proj.weight", {channels[2], d}, InitRule::normal(std));
  params.add(prefix + ".a_proj.weight", {H, d}, InitRule::normal(std));
  if (gka_.use_beta_gate) {
    params.add(prefix + ".b_proj.weight", {H, d}, InitRule::normal(std));
    params.add(prefix + ".b_proj.bias", {H}, InitRule::constant(0.0));
  }
  if (gka_.use_alpha_connection) {
    params.add(prefix + ".alpha_proj.weight", {H, d}, InitRule::normal(std));
    params.add(prefix + ".alpha_proj.bias", {H}, InitRule::constant(0.0));
  }
  // A = exp(A_log) ~ U(0, 16) (the reference's log(U(0, 16))); the low end only keeps the log finite.
  params.add(prefix + ".A_log", {H}, InitRule::log_uniform(1e-4, 16.0), false).keep_f32 = true;
  params.add(prefix + ".dt_bias", {H}, InitRule::softplus_inverse_log_uniform(1e-3, 0.1, 1e-4), false).keep_f32 = true;
  for (size_t i = 0; i < (gka_.use_v_conv ? 3u : 2u); ++i)
    params.add(prefix + "." + kConvs[i] + ".weight", {channels[i], 1, gka_.conv_size}, InitRule::normal(std));
  if (gka_.use_gate) params.add(prefix + ".g_proj.weight", {H * D, d}, InitRule::normal(std));
  params.add(prefix + ".o_norm.weight", {D}, InitRule::constant(1.0), false);
  params.add(prefix + ".o_proj.weight", {d, H * D}, InitRule::normal(std));
  if (gka_.kv_proj_rank) {
    k_expansion_.emplace(prefix, "k", *gka_.kv_proj_rank, kv_heads_, H, D, gka_.kv_learnable_residual, std, params);
    v_expansion_.emplace(prefix, "v", *gka_.kv_proj_rank, kv_heads_, H, D, gka_.kv_learnable_residual, std, params);
  }
}

void GkaMixer::set_num_iter(int64_t num_iter) {
  PRIMER_CHECK(num_iter >= 0, "{}: num_iter is {}, expected >= 0 Chebyshev iterations", prefix_, num_iter);
  gka_.num_iter = num_iter;
}

ag::Var GkaMixer::branch(const ag::Var& x, const char* name, int64_t heads, size_t slot, const StateCarry& carry,
                         bool l2_normalized) {
  const ag::Var y = ag::linear(x, weight(std::string(name) + "_proj.weight"));
  const ag::Var w = slot < 2 || gka_.use_v_conv ? weight(std::string(kConvs[slot]) + ".weight") : nullptr;
  return conv_heads(y, w, nullptr, false, heads, head_dim_, slot, carry, l2_normalized ? kL2Eps : -1);
}

ag::Var GkaMixer::head_gate(const ag::Var& projected, const char* name, double offset) {
  return ag::sigmoid_gate(projected, weight(std::string(name) + "_proj.bias"), offset);
}

ag::Var GkaMixer::forward(const ag::Var& input, const MixerContext& ctx, const MixerState* state_in,
                          MixerState* state_out) {
  const StateCarry carry(ctx, state_in, state_out, gka_.use_v_conv ? 3 : 2, 2, prefix_ + " (H, S)",
                         {q_heads_, kv_heads_, k_expansion_.has_value()});
  const ag::Var x = carry.to_rows(input);
  const int64_t H = carry.local_heads(heads_), D = head_dim_;  // the heads the core runs
  // The projections first: their GEMMs keep the GPU busy while the host issues the gates' small ops. q and k
  // leave their convs L2-normalised (in the conv's pass), unless Adaptive GQA expands k before its norm.
  const bool normed_in_conv = !k_expansion_;
  const ag::Var q_branch = branch(x, "q", q_heads_, 0, carry, normed_in_conv),
                k_branch = branch(x, "k", kv_heads_, 1, carry, normed_in_conv),
                v_branch = branch(x, "v", kv_heads_, 2, carry, false);

  // The per-head projections in use (decay a, β, α) as one GEMM.
  std::vector<std::string> gates;
  if (gka_.use_forgetting_gate) gates.push_back("a");
  if (gka_.use_beta_gate) gates.push_back("b");
  if (gka_.use_alpha_connection) gates.push_back("alpha");
  std::vector<ag::Var> gate_weights;
  for (const std::string& name : gates) gate_weights.push_back(weight(name + "_proj.weight"));
  const std::vector<ag::Var> projected = gates.empty() ? std::vector<ag::Var>() : ag::linear_joined(x, gate_weights);
  const auto gate_input = [&](const char* name) {
    return projected[size_t(std::find(gates.begin(), gates.end(), name) - gates.begin())];
  };
  // The precise mode in bf16 keeps in f32 what meets x̂'s part off the keys' span (at a small ridge up to
  // κ = (1 + ridge)/ridge times its part along them, which is all the readout sees: one bf16 of x̂ would leave that up
  // to κ · 2^-9 off, core/ops/cuda/chebyshev_solve.h): x̂, q̃ and their gradients, and k and v from their β scaling
  // on, whose gradients (dk holds x̂'s and the adjoint's large parts) make β's, A_log's and the keys' by dots with k
  // that cancel. The kernels still take bf16 tensor-core operands, as hi + lo where a vector needs it.
  const bool precise = gka_.precise_iterate && x->value.dtype() == DType::BF16;
  // β and α scale whole head rows (scale_heads: one pass each way, the gate kept in f32); β in the pass that
  // repeats k's and v's heads (and casts them to f32 in the precise mode).
  ag::Var beta;
  if (gka_.use_beta_gate) {
    beta = carry.to_heads(head_gate(gate_input("b"), "b", kBetaFloor));  // [B, T, H]
  }
  const ExpandedHeads heads =
      expand_qkv(q_branch, k_branch, v_branch, H, normed_in_conv ? -1 : kL2Eps, k_expansion_ ? &*k_expansion_ : nullptr,
                 v_expansion_ ? &*v_expansion_ : nullptr, true, beta ? &beta : nullptr,
                 precise ? std::optional(DType::F32) : std::nullopt, precise && beta && x->value.is_cuda());
  const ag::Var &q = heads.q, &k = heads.k, &v = heads.v;
  // The readout's bf16 operands, formed in the passes that write its f32 inputs (ops::GlaOperands).
  ops::GlaOperands readout_operands{.k = heads.k_bf16, .v = heads.v_bf16};

  // The decay in A_log's dtype (f32; f64 in references), as the solve and the readout take it.
  const DType gate_dtype = weight("A_log")->value.dtype();
  // The gates are token-local: formed on this rank's tokens, then moved with their heads under A2A.
  const Shape& qs = q->value.shape();
  const ag::Var g = gka_.use_forgetting_gate
                        ? carry.to_heads(ag::ssm_decay(gate_input("a"), weight("A_log"), weight("dt_bias")))
                        : ag::constant(Tensor::zeros({qs[0], qs[1], H}, gate_dtype, x->value.device()));
  const ag::Var gk = gka_.use_forgetting_gate && gka_.use_forgetting_gate_kk ? g : nullptr;

  ops::ChebyshevOptions solve;
  solve.ridge = gka_.ridge_strength;
  solve.num_iter = gka_.num_iter;
  solve.bp_lambda = gka_.bp_lambda;
  solve.precise_iterate = gka_.precise_iterate;
  solve.f16_operands = precise && gka_.iterate_fp16;  // f32 training keeps the bf16 pairs
  // Under P2P both states enter from the earlier chunks: H and S are scalar-decay recurrences (H of k kᵀ under gk,
  // S of k vᵀ under g), summarised through the GLA kernels; the solve, nonlinear in H, then runs once from the true
  // H (where the reference recomputes the whole chunk after a zero-state pass).
  const ag::Var h0 = carry.recurrent_in(0, [&] {
    return scalar_decay_summary(
        k, k, gk ? gk : ag::constant(Tensor::zeros(g->value.shape(), g->value.dtype(), g->value.device())));
  });
  const ag::Var s0 = carry.recurrent_in(1, [&] { return scalar_decay_summary(k, v, g); });
  const ag::Var xhat = ag::chebyshev_solve(q, k, gk, solve, h0, carry.recurrent_out(0));
  // q̃ = q + α (x̂ − q): a convex mix of the query and the regression's answer, in one pass each way.
  const bool split_qt = precise && xhat->value.is_cuda();
  const ag::Var qt = gka_.use_alpha_connection
                         ? ag::scale_heads(xhat, carry.to_heads(head_gate(gate_input("alpha"), "alpha")), q, H,
                                           {.base = ops::HeadBase::Lerp,
                                            .bf16_hi_out = split_qt ? &readout_operands.q_hi : nullptr,
                                            .bf16_lo_out = split_qt ? &readout_operands.q_lo : nullptr})
                         : xhat;
  const double scale = gka_.gla_rescale ? 1.0 / std::sqrt(double(D)) : 1.0;
  // The precise mode's readout leaves the kernel in bf16, rounded once from its f32 accumulators.
  const ag::Var o = carry.from_heads(ag::gla(qt, k, v, g, scale, s0, carry.recurrent_out(1),
                                             precise ? std::optional(DType::BF16) : std::nullopt, readout_operands));

  const ag::Var g_proj = gka_.use_gate ? weight("g_proj.weight") : nullptr;
  return carry.from_rows(norm_gate_project(o, x, weight("o_norm.weight"), g_proj ? &g_proj : nullptr,
                                           weight("o_proj.weight"), gka_.norm_eps));
}

double GkaMixer::core_forward_flops(int64_t head_dim, int64_t num_iter) {
  // Per token: chunk states of H and S (2D² each), ‖H_c‖_F (2D² + 2CD), r matvecs
  // (2D² + 4CD each), the readout (2D² + 4CD): (2r + 8)D² + (4r + 6)CD, 2 FLOPs per multiply-add.
  const double D = double(head_dim), C = double(kChunk), r = double(num_iter);
  return (2 * r + 8) * D * D + (4 * r + 6) * C * D;
}

double GkaMixer::flops_per_token(int64_t /*seq_len*/) const {
  const double d = double(config_.hidden_size), D = double(head_dim_), H = double(heads_);
  const double qkv = double(q_heads_ + 2 * kv_heads_) * D;
  const double gates = H * (1 + (gka_.use_beta_gate ? 1 : 0) + (gka_.use_alpha_connection ? 1 : 0));
  const double projections = 2.0 * d * (qkv + gates + (gka_.use_gate ? H * D : 0) + H * D);
  const double conv_channels = double(q_heads_ + kv_heads_ * (gka_.use_v_conv ? 2 : 1)) * D;
  return projections + 2.0 * double(gka_.conv_size) * conv_channels + H * core_forward_flops(head_dim_, gka_.num_iter);
}

}  // namespace primer::layers
