#include "layers/bmf_mixer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/autograd/functions.h"
#include "core/autograd/merged_attention.h"
#include "core/autograd/slicing.h"
#include "core/check.h"
#include "layers/kv_cache.h"
#include "layers/mixer_spec.h"

namespace primer::layers {
namespace {

// The cache's in-context half [0, Hkv) or fading half [Hkv, 2·Hkv) along the heads.
Tensor cache_half(const Tensor& packed, bool fading) {
  const int64_t h = packed.size(2) / 2;
  return packed.slice(2, fading ? h : 0, fading ? 2 * h : h).contiguous();
}

// Row r of in-context and fading [B, n, Hkv, D], side by side along the heads: [1, n, 2·Hkv, D].
Tensor pack_row(const Tensor& in_context, const Tensor& fading, int64_t r) {
  const int64_t n = in_context.size(1), h = in_context.size(2);
  Tensor out = Tensor::empty({1, n, 2 * h, in_context.size(3)}, in_context.dtype(), in_context.device());
  out.slice(2, 0, h).copy_from(in_context.slice(0, r, r + 1));
  out.slice(2, h, 2 * h).copy_from(fading.slice(0, r, r + 1));
  return out;
}

// [1, n1, H, D] followed by row r of [B, n2, H, D] along the tokens.
Tensor after(const Tensor& cached, const Tensor& rows, int64_t r) {
  const Tensor row = rows.slice(0, r, r + 1);
  Tensor out = Tensor::empty({1, cached.size(1) + row.size(1), row.size(2), row.size(3)}, row.dtype(), row.device());
  out.slice(1, 0, cached.size(1)).copy_from(cached);
  out.slice(1, cached.size(1), out.size(1)).copy_from(row);
  return out;
}

}  // namespace

MixerKind bmojo_ssm_kind(const std::string& ssm_mixer, const std::string& source) {
  if (ssm_mixer == "mamba2") return MixerKind::Mamba2;
  if (ssm_mixer == "gdn" || ssm_mixer == "gated_deltanet") return MixerKind::GatedDeltaNet;
  if (ssm_mixer == "gka" || ssm_mixer == "gated_kalmanet") return MixerKind::GatedKalmaNet;
  PRIMER_FAIL("{}: '{}' is not a B'MOJO-F SSM (expected mamba2, gdn, gated_deltanet, gka or gated_kalmanet)", source,
              ssm_mixer);
}

BmfMixer::BmfMixer(const ModelConfig& c, const std::string& prefix, ParameterRegistry& params)
    : config_(c), prefix_(prefix), attn_(prefix + ".bmojo_attn."), params_(params), window_(c.bmojo.window_size) {
  PRIMER_CHECK(window_ > 0, "{}: bmojo_config.window_size is {}, expected > 0", prefix, window_);
  // The SSM first, under its own module name, as the reference's BMojoLayer registers it.
  const MixerSpec& ssm = mixer_spec(bmojo_ssm_kind(c.bmojo.ssm_mixer));
  ssm_ = ssm.make(c, prefix + "." + ssm.module, params);
  const double std = c.initializer_range;
  const int64_t q_dim = c.num_attention_heads * c.head_dim, kv_dim = c.num_key_value_heads * c.head_dim;
  std::vector<std::string> suffixes = {""};
  if (!c.bmojo.tie_attn_weights) suffixes.push_back("_");
  for (const std::string& s : suffixes) {
    params.add(attn_ + "q_proj" + s + ".weight", {q_dim, c.hidden_size}, InitRule::normal(std));
    params.add(attn_ + "k_proj" + s + ".weight", {kv_dim, c.hidden_size}, InitRule::normal(std));
    params.add(attn_ + "v_proj" + s + ".weight", {kv_dim, c.hidden_size}, InitRule::normal(std));
    if (s.empty()) params.add(attn_ + "o_proj.weight", {c.hidden_size, q_dim}, InitRule::normal(std));
    if (c.qk_norm) {
      params.add(attn_ + "q_norm" + s + ".weight", {c.head_dim}, InitRule::constant(1.0), false);
      params.add(attn_ + "k_norm" + s + ".weight", {c.head_dim}, InitRule::constant(1.0), false);
    }
  }
}

ag::Var BmfMixer::heads(const ag::Var& x, const std::string& proj, const std::string& norm, int64_t count,
                        const MixerContext& ctx) {
  const int64_t B = x->value.size(0), T = x->value.size(1);
  ag::Var h = ag::reshape(ag::linear(x, params_.get(attn_ + proj + ".weight").var), {B, T, count, config_.head_dim});
  if (norm.empty()) return h;  // values
  if (config_.qk_norm) h = ag::rmsnorm(h, params_.get(attn_ + norm + ".weight").var, config_.rms_norm_eps);
  return ag::rope(h, ctx.positions, ctx.inv_freq);
}

BmfMixer::Heads BmfMixer::project(const ag::Var& x, const ag::Var& fading, const MixerContext& ctx) {
  const int64_t Hq = config_.num_attention_heads, Hkv = config_.num_key_value_heads;
  const std::string fade = config_.bmojo.tie_attn_weights ? "" : "_";
  Heads h;
  h.q = heads(x, "q_proj", "q_norm", Hq, ctx);
  h.k = heads(x, "k_proj", "k_norm", Hkv, ctx);
  h.v = heads(x, "v_proj", "", Hkv, ctx);
  h.q_f = fade.empty() ? h.q : heads(x, "q_proj" + fade, "q_norm" + fade, Hq, ctx);
  h.k_f = heads(fading, "k_proj" + fade, "k_norm" + fade, Hkv, ctx);
  h.v_f = heads(fading, "v_proj" + fade, "", Hkv, ctx);
  return h;
}

std::pair<ops::AttentionOptions, ops::AttentionOptions> BmfMixer::windows(int64_t first, int64_t n) const {
  // Query p sees in-context keys (p − W, p] and fading keys (p − 2W, p − W], i.e. fading keys shifted W positions
  // later under the same window; the offsets place the mask (the n keys before the queries first, then theirs).
  ops::AttentionOptions here;
  here.window = window_;
  // Without QK-norm the reference scales by the hidden size per head (its kv_channels), not head_dim.
  if (!config_.qk_norm) here.scale = 1.0 / std::sqrt(double(config_.hidden_size / config_.num_attention_heads));
  ops::AttentionOptions fading = here;
  here.q_offset = fading.q_offset = first + n;
  here.k_offset = first;
  fading.k_offset = first + window_;
  return {here, fading};
}

ag::Var BmfMixer::output(const ag::Var& o) {
  const Shape& s = o->value.shape();
  return ag::linear(ag::reshape(o, {s[0], s[1], s[2] * s[3]}), params_.get(attn_ + "o_proj.weight").var);
}

ag::Var BmfMixer::forward(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in,
                          MixerState* state_out) {
  PRIMER_CHECK(ctx.positions.defined() && ctx.inv_freq.defined(),
               "{}: B'MOJO-F needs the tokens' positions and the RoPE frequencies", prefix_);
  if (ctx.sequence) return forward_sequence_parallel(x, ctx, state_in, state_out);
  const int64_t B = x->value.size(0), W = window_;

  // The fading tokens: the SSM's output, from its carried state.
  MixerState ssm_in, ssm_out;
  if (state_in) {
    ssm_in.conv = state_in->conv;
    ssm_in.recurrent = state_in->recurrent;
  }
  const ag::Var fading = ssm_->forward(x, ctx, state_in ? &ssm_in : nullptr, state_out ? &ssm_out : nullptr);
  const Heads h = project(x, fading, ctx);

  const bool cached = state_in && !state_in->kv.empty();
  ag::Var o;
  if (!cached) {  // every row from its first token: one call, with gradients
    const auto [here, fading_window] = windows(0, 0);
    o = ag::merged_attention({h.q, h.k, h.v, here}, {h.q_f, h.k_f, h.v_f, fading_window});
  } else {  // decoding: each row after its own cache, as attention does; no gradient flows through a cache
    PRIMER_CHECK(int64_t(state_in->kv.size()) == B, "{}: the key/value cache holds {} rows, the input {}", prefix_,
                 state_in->kv.size(), B);
    std::vector<ag::Var> rows;
    for (int64_t r = 0; r < B; ++r) {
      const KvCache& cache = state_in->kv[size_t(r)];
      const auto [here, fading_window] = windows(cache.first_position(), cache.size());
      auto row = [r](const ag::Var& t) { return ag::constant(t->value.slice(0, r, r + 1).contiguous()); };
      auto with_cache = [&](const Tensor& packed, bool fading, const ag::Var& t) {
        return ag::constant(after(cache_half(packed, fading), t->value, r));
      };
      rows.push_back(ag::merged_attention(
          {row(h.q), with_cache(cache.keys(), false, h.k), with_cache(cache.values(), false, h.v), here},
          {row(h.q_f), with_cache(cache.keys(), true, h.k_f), with_cache(cache.values(), true, h.v_f), fading_window}));
    }
    o = ag::constant(ag::concat(rows, 0)->value);
  }

  if (state_out) {
    state_out->conv = ssm_out.conv;
    state_out->recurrent = ssm_out.recurrent;
    std::vector<KvCache> kv = cached ? state_in->kv : std::vector<KvCache>(size_t(B));
    for (int64_t r = 0; r < B; ++r) {
      KvCache& cache = kv[size_t(r)];
      cache.append(pack_row(h.k->value, h.k_f->value, r), pack_row(h.v->value, h.v_f->value, r));
      // The next query p reads in-context keys from p − W + 1 and fading keys from p − 2W + 1.
      cache.keep_last(std::min(2 * W - 1, cache.size()));
    }
    state_out->kv = std::move(kv);
  }
  return output(o);
}

bool BmfMixer::runs_sequence_parallel(ag::RecurrentSequenceMode mode) const {
  return mode != ag::RecurrentSequenceMode::USP && ssm_->runs_sequence_parallel(mode);
}

ag::Var BmfMixer::forward_sequence_parallel(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in,
                                            MixerState* state_out) {
  PRIMER_CHECK(!state_out, "{}: B'MOJO-F returns no carried state under sequence parallelism", prefix_);
  ag::SequenceExchange& sp = *ctx.sequence;
  const int64_t B = x->value.size(0), Tc = x->value.size(1) / sp.chunks(), R = sp.chunks() * B;
  const int64_t reach = 2 * window_ - 1;  // the tokens before a query that its two windows read
  // A carried key/value cache belongs to the whole sequence's start, and a chunk shorter than the reach would need
  // tokens from further back than its predecessor: both run on the gathered sequence (USP).
  if ((state_in && !state_in->kv.empty()) || Tc < reach) return mix_gathered(*this, x, ctx, state_in);

  MixerState ssm_in;
  if (state_in) {
    ssm_in.conv = state_in->conv;
    ssm_in.recurrent = state_in->recurrent;
  }
  const ag::Var fading = mix_sequence(*ssm_, x, ctx, state_in ? &ssm_in : nullptr);  // the SSM's own mode
  const Heads h = project(x, fading, ctx);

  // Each chunk row takes its predecessor chunk's last `reach` keys and values (both halves) in one neighbour
  // exchange, as a short convolution's halo (whose backward returns their gradients to the sender).
  const int64_t Hkv = config_.num_key_value_heads, D = config_.head_dim, C = Hkv * D;
  const std::vector<ag::Var> mine = {sp.to_chunk_rows(h.k), sp.to_chunk_rows(h.v), sp.to_chunk_rows(h.k_f),
                                     sp.to_chunk_rows(h.v_f)};
  std::vector<ag::Var> flat;
  for (const ag::Var& t : mine) flat.push_back(ag::reshape(t, {R, Tc, C}));
  const ag::Var halo = ag::transpose(sp.conv_halo(ag::concat(flat, 2), reach, nullptr), 1, 2);  // [R, reach, 4C]
  const std::vector<ag::Var> received = ag::split(halo, 2, {C, C, C, C});
  std::vector<ag::Var> extended;  // [R, reach + Tc, Hkv, D]: the predecessor's tokens, then the chunk's
  for (size_t i = 0; i < mine.size(); ++i)
    extended.push_back(ag::concat({ag::reshape(received[i], {R, reach, Hkv, D}), mine[i]}, 1));
  const ag::Var q = sp.to_chunk_rows(h.q), q_f = config_.bmojo.tie_attn_weights ? nullptr : sp.to_chunk_rows(h.q_f);

  // In every layout the sequence's first chunk is rank 0's first local chunk (rows [0, B)): it has no predecessor
  // and attends within itself; every other chunk row attends over its halo too.
  const int64_t first = sp.rank() == 0 ? B : 0;
  // Rows [0, first) and [first, R) of a chunk-row tensor, cut in one copy (either part may be empty).
  auto cut = [&](const ag::Var& t) -> std::pair<ag::Var, ag::Var> {
    if (first == 0) return {nullptr, t};
    if (first == R) return {t, nullptr};
    const std::vector<ag::Var> p = ag::split(t, 0, {first, R - first});
    return {p[0], p[1]};
  };
  const auto [q_first, q_rest] = cut(q);
  const auto [qf_first, qf_rest] = config_.bmojo.tie_attn_weights ? std::pair{q_first, q_rest} : cut(q_f);
  std::vector<ag::Var> parts;
  if (first > 0) {
    const auto [here, fading_window] = windows(0, 0);
    parts.push_back(ag::merged_attention({q_first, cut(mine[0]).first, cut(mine[1]).first, here},
                                         {qf_first, cut(mine[2]).first, cut(mine[3]).first, fading_window}));
  }
  if (first < R) {
    const auto [here, fading_window] = windows(0, reach);
    parts.push_back(ag::merged_attention({q_rest, cut(extended[0]).second, cut(extended[1]).second, here},
                                         {qf_rest, cut(extended[2]).second, cut(extended[3]).second, fading_window}));
  }
  return output(sp.from_chunk_rows(parts.size() == 1 ? parts[0] : ag::concat(parts, 0)));
}

double BmfMixer::flops_per_token(int64_t seq_len) const {
  const double d = double(config_.hidden_size), hd = double(config_.head_dim);
  const double q = double(config_.num_attention_heads) * hd, kv = double(config_.num_key_value_heads) * hd;
  const bool untied = !config_.bmojo.tie_attn_weights;
  // q, k, v, o on the tokens; k, v (and q, untied) on the fading tokens.
  const double projections = 2.0 * d * (2 * q + 2 * kv + 2 * kv + (untied ? q : 0));
  // Each query reads up to W in-context and W fading keys: QKᵀ and PV, 2 FLOPs per MAC.
  const double context =
      double(std::min(window_, seq_len)) + double(std::clamp(seq_len - window_, int64_t(0), window_));
  return ssm_->flops_per_token(seq_len) + projections + 4.0 * q * context;
}

}  // namespace primer::layers
