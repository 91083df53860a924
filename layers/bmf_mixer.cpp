#include "layers/bmf_mixer.h"

#include <algorithm>
#include <cmath>

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

ag::Var BmfMixer::forward(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in,
                          MixerState* state_out) {
  PRIMER_CHECK(!ctx.sequence, "{}: B'MOJO-F runs under sequence parallelism by USP (layers::mix_sequence)", prefix_);
  PRIMER_CHECK(ctx.positions.defined() && ctx.inv_freq.defined(),
               "{}: B'MOJO-F needs the tokens' positions and the RoPE frequencies", prefix_);
  const int64_t B = x->value.size(0), T = x->value.size(1), W = window_;
  const int64_t Hq = config_.num_attention_heads, Hkv = config_.num_key_value_heads;

  // The fading tokens: the SSM's output, from its carried state.
  MixerState ssm_in, ssm_out;
  if (state_in) {
    ssm_in.conv = state_in->conv;
    ssm_in.recurrent = state_in->recurrent;
  }
  const ag::Var fading = ssm_->forward(x, ctx, state_in ? &ssm_in : nullptr, state_out ? &ssm_out : nullptr);

  const std::string fade = config_.bmojo.tie_attn_weights ? "" : "_";
  const ag::Var q = heads(x, "q_proj", "q_norm", Hq, ctx);
  ag::Var k = heads(x, "k_proj", "k_norm", Hkv, ctx);
  ag::Var v = heads(x, "v_proj", "", Hkv, ctx);
  const ag::Var q_f = fade.empty() ? q : heads(x, "q_proj" + fade, "q_norm" + fade, Hq, ctx);
  ag::Var k_f = heads(fading, "k_proj" + fade, "k_norm" + fade, Hkv, ctx);
  ag::Var v_f = heads(fading, "v_proj" + fade, "", Hkv, ctx);

  // Query p sees in-context keys (p − W, p] and fading keys (p − 2W, p − W], i.e. fading keys shifted W positions later
  // under the same window; the offsets place the mask (a row's cached tokens first, then these).
  ops::AttentionOptions in_context;
  in_context.window = W;
  // Without QK-norm the reference scales by the hidden size per head (its kv_channels), not head_dim.
  if (!config_.qk_norm) in_context.scale = 1.0 / std::sqrt(double(config_.hidden_size / Hq));
  auto windows = [&](int64_t first, int64_t n) {  // n cached tokens from position `first`
    ops::AttentionOptions here = in_context, fading_window = in_context;
    here.q_offset = fading_window.q_offset = first + n;
    here.k_offset = first;
    fading_window.k_offset = first + W;
    return std::pair{here, fading_window};
  };
  const bool cached = state_in && !state_in->kv.empty();
  ag::Var o;
  if (!cached) {  // every row from its first token: one call, with gradients
    const auto [here, fading_window] = windows(0, 0);
    o = ag::merged_attention({q, k, v, here}, {q_f, k_f, v_f, fading_window});
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
          {row(q), with_cache(cache.keys(), false, k), with_cache(cache.values(), false, v), here},
          {row(q_f), with_cache(cache.keys(), true, k_f), with_cache(cache.values(), true, v_f), fading_window}));
    }
    o = ag::constant(ag::concat(rows, 0)->value);
  }

  if (state_out) {
    state_out->conv = ssm_out.conv;
    state_out->recurrent = ssm_out.recurrent;
    std::vector<KvCache> kv = cached ? state_in->kv : std::vector<KvCache>(size_t(B));
    for (int64_t r = 0; r < B; ++r) {
      KvCache& cache = kv[size_t(r)];
      cache.append(pack_row(k->value, k_f->value, r), pack_row(v->value, v_f->value, r));
      // The next query p reads in-context keys from p − W + 1 and fading keys from p − 2W + 1.
      cache.keep_last(std::min(2 * W - 1, cache.size()));
    }
    state_out->kv = std::move(kv);
  }
  return ag::linear(ag::reshape(o, {B, T, Hq * config_.head_dim}), params_.get(attn_ + "o_proj.weight").var);
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
