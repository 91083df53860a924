#include "layers/attention_mixer.h"

#include <algorithm>

#include "core/autograd/functions.h"
#include "core/check.h"
#include "core/ops/attention.h"
#include "core/ops/attention_over_cache.h"

namespace primer::layers {

namespace {
// A decode step attends over a full-attention cache in chunks from this many keys on: with one CTA per head a short
// cache is read quickly, and each chunked step costs a few extra small launches. The chunk count aims at about
// 128 CTAs (chunks × query heads), one wave on an H100's 132 SMs.
constexpr int64_t kChunkedFrom = 4096;
}  // namespace
AttentionMixer::AttentionMixer(const ModelConfig& c, const std::string& prefix, ParameterRegistry& params,
                               int64_t window)
    : config_(c), prefix_(prefix), params_(params), window_(window) {
  const double std = c.initializer_range;
  const int64_t q_dim = c.num_attention_heads * c.head_dim, kv_dim = c.num_key_value_heads * c.head_dim;
  params.add(prefix + ".q_proj.weight", {q_dim, c.hidden_size}, InitRule::normal(std));
  params.add(prefix + ".k_proj.weight", {kv_dim, c.hidden_size}, InitRule::normal(std));
  params.add(prefix + ".v_proj.weight", {kv_dim, c.hidden_size}, InitRule::normal(std));
  params.add(prefix + ".o_proj.weight", {c.hidden_size, q_dim}, InitRule::normal(std));
  if (c.qk_norm) {
    params.add(prefix + ".q_norm.weight", {c.head_dim}, InitRule::constant(1.0), false);
    params.add(prefix + ".k_norm.weight", {c.head_dim}, InitRule::constant(1.0), false);
  }
}

ag::Var AttentionMixer::project_heads(const ag::Var& x, const std::string& proj, const std::string& norm, int64_t heads,
                                      const MixerContext& ctx, bool rotate) {
  const int64_t B = x->value.size(0), T = x->value.size(1);
  ag::Var h = ag::reshape(ag::linear(x, params_.get(prefix_ + proj).var), {B, T, heads, config_.head_dim});
  if (!rotate) return h;
  if (config_.qk_norm)
    return ag::rmsnorm_rope(h, params_.get(prefix_ + norm).var, config_.rms_norm_eps, ctx.positions, ctx.inv_freq);
  return ag::rope(h, ctx.positions, ctx.inv_freq);
}

ag::Var AttentionMixer::forward(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in,
                                MixerState* state_out) {
  PRIMER_CHECK(!state_in || (state_in->conv.empty() && state_in->recurrent.empty()),
               "{}: state_in holds a recurrent mixer's state, expected a key/value cache", prefix_);
  PRIMER_CHECK(!ctx.sequence || (!state_out && (!state_in || state_in->kv.empty())),
               "{}: a key/value cache is not supported under sequence parallelism", prefix_);
  const int64_t B = x->value.size(0), T = x->value.size(1);
  ag::Var q = project_heads(x, ".q_proj.weight", ".q_norm.weight", config_.num_attention_heads, ctx, true);
  ag::Var k = project_heads(x, ".k_proj.weight", ".k_norm.weight", config_.num_key_value_heads, ctx, true);
  ag::Var v = project_heads(x, ".v_proj.weight", "", config_.num_key_value_heads, ctx, false);
  ops::AttentionOptions opt;
  opt.window = window_;
  ag::Var o;
  if (state_out || (state_in && !state_in->kv.empty())) {
    o = ag::constant(decode_rows(q->value, k->value, v->value, opt, state_in, state_out));
  } else {
    // q's gradient goes straight to the fused norm + rotation, which reads attention's f32 dq unrounded.
    opt.f32_dq = config_.qk_norm && !ctx.sequence;
    o = ctx.sequence ? ctx.sequence->attention(q, k, v, opt) : ag::attention(q, k, v, opt);
  }
  return ag::linear_kept(ag::reshape(o, {B, T, config_.num_attention_heads * config_.head_dim}),
                         params_.get(prefix_ + ".o_proj.weight").var);
}

Tensor AttentionMixer::decode_rows(const Tensor& q, const Tensor& k, const Tensor& v, ops::AttentionOptions opt,
                                   const MixerState* state_in, MixerState* state_out) const {
  const int64_t B = q.size(0), T = q.size(1);
  std::vector<KvCache> kv = state_in ? state_in->kv : std::vector<KvCache>();
  if (kv.empty()) kv.resize(size_t(B));
  PRIMER_CHECK(int64_t(kv.size()) == B, "{}: the key/value cache holds {} rows, the input {}", prefix_, kv.size(), B);
  // Each row's new keys join its cache, and its queries attend over the cache at the row's own positions (rows may
  // have seen different numbers of tokens); the causal mask works on positions.
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  for (int64_t r = 0; r < B; ++r) {
    KvCache& cache = kv[size_t(r)];
    cache.append(k.slice(0, r, r + 1), v.slice(0, r, r + 1));
    opt.k_offset = cache.first_position();
    opt.q_offset = cache.next_position() - T;
    const Tensor q_row = q.slice(0, r, r + 1);
    if (T == 1 && window_ == 0 && cache.size() >= kChunkedFrom) {
      // One query over a long cache: in chunks, so that more CTAs than heads read it (ops/attention_over_cache.h).
      const int64_t chunks = std::max<int64_t>(2, 128 / config_.num_attention_heads);
      out.slice(0, r, r + 1)
          .copy_from(ops::attention_over_cache(q_row, cache.keys(), cache.values(), opt.scale,
                                               (cache.size() + chunks - 1) / chunks));
    } else {
      out.slice(0, r, r + 1).copy_from(ops::attention(q_row, cache.keys(), cache.values(), opt, nullptr));
    }
    // A sliding window's next query sees at most the last `window` keys (itself included): older ones are dropped.
    if (window_ > 0) cache.keep_last(window_);
  }
  if (state_out) {
    state_out->conv.clear();
    state_out->recurrent.clear();
    state_out->kv = std::move(kv);
  }
  return out;
}

double AttentionMixer::flops_per_token(int64_t seq_len) const {
  const double d = double(config_.hidden_size), hd = double(config_.head_dim);
  const double q = double(config_.num_attention_heads) * hd, kv = double(config_.num_key_value_heads) * hd;
  const double projections = 2.0 * d * (2 * q + 2 * kv);
  // Causal: on average each query attends to half the context (or the window): QK^T and PV, 2 FLOPs per MAC.
  const double context = window_ > 0 ? double(std::min(window_, seq_len)) : double(seq_len) / 2;
  return projections + 4.0 * q * context;
}

}  // namespace primer::layers
