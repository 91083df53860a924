#include "layers/mamba2_mixer.h"

#include "core/autograd/functions.h"
#include "core/autograd/gla.h"
#include "core/check.h"
#include "layers/ssm_blocks.h"

namespace primer::layers {
namespace {

ag::Var as_dtype(const ag::Var& x, DType dtype) { return x->value.dtype() == dtype ? x : ag::cast(x, dtype); }

}  // namespace

Mamba2Mixer::Mamba2Mixer(const ModelConfig& c, const std::string& prefix, ParameterRegistry& params)
    : config_(c),
      prefix_(prefix),
      params_(params),
      heads_(c.num_attention_heads),
      kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim),
      d_inner_(c.num_attention_heads * c.head_dim),
      d_xb_(c.num_key_value_heads * c.head_dim) {
  PRIMER_CHECK(heads_ % kv_heads_ == 0, "{}: {} query heads are not a multiple of {} key/value heads", prefix, heads_,
               kv_heads_);
  const double std = c.initializer_range;
  const int64_t conv_channels = d_inner_ + 2 * d_xb_, taps = c.mamba2.conv_size;
  params.add(prefix + ".in_proj.weight", {2 * d_inner_ + 2 * d_xb_ + heads_, c.hidden_size}, InitRule::normal(std));
  params.add(prefix + ".conv1d.weight", {conv_channels, 1, taps}, InitRule::normal(std));
  params.add(prefix + ".conv1d.bias", {conv_channels}, InitRule::constant(0.0), false);
  // The SSM dynamics (hmf.md §3.3): softplus(dt_bias) log-uniform in [1e-3, 0.1] (floor 1e-4), A = exp(A_log)
  // uniform in (0, 16), D = 1; fp32 even under bf16, never weight-decayed.
  params.add(prefix + ".dt_bias", {heads_}, InitRule::softplus_inverse_log_uniform(1e-3, 0.1, 1e-4), false).keep_f32 =
      true;
  params.add(prefix + ".A_log", {heads_}, InitRule::log_uniform(0.0, 16.0), false).keep_f32 = true;
  params.add(prefix + ".D", {heads_}, InitRule::constant(1.0), false).keep_f32 = true;
  params.add(prefix + ".norm.weight", {d_inner_}, InitRule::constant(1.0), false);
  params.add(prefix + ".out_proj.weight", {c.hidden_size, d_inner_}, InitRule::normal(std));
  if (c.mamba2.use_qk_norm) {
    params.add(prefix + ".B_norm.weight", {head_dim_}, InitRule::constant(1.0), false);
    params.add(prefix + ".C_norm.weight", {head_dim_}, InitRule::constant(1.0), false);
  }
}

ag::Var Mamba2Mixer::key_or_query(const ag::Var& x, const std::string& norm, int64_t heads, const Tensor& positions,
                                  const Tensor& inv_freq) {
  ag::Var h = ag::reshape(x, {x->value.size(0), x->value.size(1), heads, head_dim_});
  if (config_.mamba2.use_qk_norm) h = ag::rmsnorm(h, weight(norm), config_.rms_norm_eps);
  if (config_.mamba2.use_pos_emb) {
    PRIMER_CHECK(positions.defined() && inv_freq.defined(),
                 "{}: use_pos_emb needs token positions and RoPE frequencies in the mixer context", prefix_);
    h = ag::rope(h, positions, inv_freq);
  }
  return h;
}

ag::Var Mamba2Mixer::forward(const ag::Var& input, const MixerContext& ctx, const MixerState* state_in,
                             MixerState* state_out) {
  const StateCarry carry(ctx, state_in, state_out, 1, 1, prefix_, {heads_, kv_heads_});
  const ag::Var u = carry.to_rows(input);
  const int64_t B = u->value.size(0), T_local = u->value.size(1), Dh = head_dim_;

  // Token-local work on this rank's tokens: the projections, B/C norms and RoPE at the tokens' global positions.
  // Under A2A the per-head features then move to this rank's heads over the whole sequence (T tokens, H heads).
  // in_proj's row blocks z | x | B | C | dt, each its own GEMM (no copies splitting one wide product).
  std::vector<ag::Var> zxbcdt;
  int64_t row = 0;
  for (const int64_t rows : {d_inner_, d_xb_, d_xb_, d_inner_, heads_}) {
    zxbcdt.push_back(ag::linear_rows(u, weight(".in_proj.weight"), row, row + rows));
    row += rows;
  }
  const ag::Var xs = carry.to_heads(ag::reshape(zxbcdt[1], {B, T_local, kv_heads_, Dh}));
  const ag::Var bs =
      carry.to_heads(key_or_query(zxbcdt[2], ".B_norm.weight", kv_heads_, carry.positions(), ctx.inv_freq));
  const ag::Var cs = carry.to_heads(key_or_query(zxbcdt[3], ".C_norm.weight", heads_, carry.positions(), ctx.inv_freq));
  const int64_t T = xs->value.size(1), H = carry.local_heads(heads_), Hkv = carry.local_heads(kv_heads_);
  // One conv over x | B | C, run on the three as they are (no joined input, no split output) with this rank's rows
  // of each segment's weights and state.
  const std::vector<int64_t> segments = {d_xb_, d_xb_, d_inner_};
  const std::vector<ag::Var> conv_inputs = {ag::reshape(xs, {B, T, Hkv * Dh}), ag::reshape(bs, {B, T, Hkv * Dh}),
                                            ag::reshape(cs, {B, T, H * Dh})};
  const ag::Var conv_weight = carry.own_heads(weight(".conv1d.weight"), 0, segments);
  const std::vector<ag::Var> parts = ag::causal_conv1d_parts(
      conv_inputs, ag::reshape(conv_weight, {conv_weight->value.size(0), conv_weight->value.size(2)}),
      carry.own_heads(weight(".conv1d.bias"), 0, segments), true,
      carry.conv_in_parts(0, conv_inputs, config_.mamba2.conv_size, segments), carry.conv_out(0));
  const ag::Var x = ag::reshape(parts[0], {B, T, Hkv, Dh});  // x's heads stay grouped: scale_heads reads each once
  const ag::Var keys = expand_heads(ag::reshape(parts[1], {B, T, Hkv, Dh}), H / Hkv);
  const ag::Var queries = ag::reshape(parts[2], {B, T, H, Dh});

  // The dynamics in fp32 (f64 beside an f64 model); the GLA takes its gate in q's dtype on the CPU and in f32 on
  // the GPU. v = Δ·x and the skip y + D·x each take x's grouped heads and the f32 Δ or D in one pass (f32 math,
  // output in the I/O dtype).
  const DType io_dtype = x->value.dtype(), gate_dtype = io_dtype == DType::F64 ? DType::F64 : DType::F32;
  // The per-head dt_bias, A_log and D of this rank's heads.
  const ag::Var dt = carry.to_heads(zxbcdt[4]);  // [B, T, H]
  const ag::Var dt_bias = carry.own_heads(weight(".dt_bias"), 0), A_log = carry.own_heads(weight(".A_log"), 0);
  ag::Var delta;  // Δ = softplus(dt + dt_bias), and the decay −exp(A_log)·Δ, from one op
  const ag::Var decay = ag::ssm_decay(dt, as_dtype(A_log, gate_dtype), as_dtype(dt_bias, gate_dtype), &delta);
  const ag::Var g = as_dtype(decay, u->value.is_cpu() ? io_dtype : DType::F32);
  const ag::Var v = ag::scale_heads(x, delta, nullptr, H);

  const ag::Var s0 = carry.recurrent_in(0, [&] { return scalar_decay_summary(keys, v, g); });
  const ag::Var y = carry.from_heads(ag::scale_heads(x, as_dtype(carry.own_heads(weight(".D"), 0), gate_dtype),
                                                     ag::gla(queries, keys, v, g, 1.0, s0, carry.recurrent_out(0)), H));

  // Back on this rank's tokens with every head: gate, then RMSNorm per head (group = head_dim) with the per-channel
  // weight (Mamba-2's RMSNormGated with norm_before_gate = False), one pass each way.
  const ag::Var normed = ag::rmsnorm(y, ag::reshape(weight(".norm.weight"), {heads_, Dh}),
                                     ag::reshape(zxbcdt[0], {B, T_local, heads_, Dh}),
                                     ops::NormSpec{config_.mamba2.norm_eps, ops::NormGate::Before});
  return carry.from_rows(ag::linear_kept(ag::reshape(normed, {B, T_local, d_inner_}), weight(".out_proj.weight")));
}

double Mamba2Mixer::flops_per_token(int64_t /*seq_len*/) const {
  const double d = double(config_.hidden_size), dh = double(head_dim_), h = double(heads_);
  const double conv_channels = double(d_inner_ + 2 * d_xb_);
  const double projections = 2.0 * d * double(2 * d_inner_ + 2 * d_xb_ + heads_) + 2.0 * double(d_inner_) * d;
  const double conv = 2.0 * conv_channels * double(config_.mamba2.conv_size);
  // Chunked SSD per head and token (chunk C = 64, K = V = head_dim): the state update k vᵀ and the readout Sᵀq
  // (2·K·V each, as MACs ×2) plus the causal half of the intra-chunk scores and their product with v (C·K + C·V).
  const double chunk = 64.0;
  const double ssd = h * (4.0 * dh * dh + chunk * 2.0 * dh);
  return projections + conv + ssd;
}

}  // namespace primer::layers
