// B'MOJO-F (the BMF token; Zancato et al., "B'MOJO: Hybrid State Space Realizations of Foundation Models with
// Eidetic and Fading Memory", 2024, as the Priming paper uses it): one sublayer holding an SSM (Mamba-2, GDN or GKA)
// and softmax attention over two windows of W = window_size tokens, merged into one softmax:
//   fading = SSM(x)                                                  [B, T, d], the SSM's whole output
//   q = rope(q_norm(q_proj x)), k = rope(k_norm(k_proj x)), v = v_proj x             the in-context tokens
//   q_f = q, k_f = rope(k_norm(k_proj fading)), v_f = v_proj fading                 the fading tokens, tied;
//     untied: q_f = rope(q_norm_(q_proj_ x)), k_f, v_f through k_proj_, k_norm_, v_proj_
//   query i attends to in-context keys [i − W + 1, i] and fading keys [i − 2W + 1, i − W] (RoPE at their own
//   positions): out_i = (o_c e^{lse_c} + o_f e^{lse_f}) / (e^{lse_c} + e^{lse_f})   (ag::merged_attention)
//   y = o_proj(out)
// as the reference implementation (awslabs/hybrid-model-factory, training/src/hmf/model/hybrid_zoo/layers/bmojo_f/)
// computes it, its softmax scale included: head_dim^-1/2 with QK-norm, else (hidden_size / num_attention_heads)^-1/2.
// Parameters under <prefix>: the SSM's under <prefix>.{mamba|gdn|gka} (its own spec), then bmojo_attn.{q,k,v,o}_proj,
// {q,k}_norm (QK-norm models) and, untied, bmojo_attn.{q,k,v}_proj_, {q,k}_norm_.
// Carried state: the SSM's conv and recurrent entries, and per row a key/value cache (layers::KvCache) of the last
// min(2W − 1, seen) tokens' in-context keys (after RoPE) and fading keys side by side along the heads
// ([1, n, 2·Hkv, D]: in-context heads first). As attention's cache it carries no gradient; the SSM's state does.
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "core/ops/attention.h"
#include "core/parameters.h"
#include "layers/mixer.h"
#include "layers/model_config.h"

namespace primer {
struct MixerSpec;
}

namespace primer::layers {

// The registration of B'MOJO-F (token BMF, module bmojo_f, config.json bmojo_config, recipe section bmojo).
const MixerSpec& bmf_spec();

// The SSM a bmojo_config's ssm_mixer names (the reference's names: mamba2, gdn | gated_deltanet, gka |
// gated_kalmanet); an error naming `source` otherwise.
MixerKind bmojo_ssm_kind(const std::string& ssm_mixer, const std::string& source = "bmojo_config.ssm_mixer");

class BmfMixer : public SequenceMixer {
 public:
  BmfMixer(const ModelConfig& config, const std::string& prefix, ParameterRegistry& params);
  // Needs ctx.positions and ctx.inv_freq (RoPE). Under sequence parallelism by P2P or A2A (where its SSM runs that
  // mode) the SSM runs it and every chunk takes its predecessor's last 2W − 1 keys and values (the reach of its
  // windows) in one neighbour exchange; by USP, with a carried key/value cache, or where a rank's chunk is shorter
  // than 2W − 1 tokens, the whole sequence is gathered (layers::mix_gathered).
  ag::Var forward(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in = nullptr,
                  MixerState* state_out = nullptr) override;
  bool runs_sequence_parallel(ag::RecurrentSequenceMode mode) const override;
  double flops_per_token(int64_t seq_len) const override;
  SequenceMixer& ssm() { return *ssm_; }

 private:
  // rope(norm(proj(x))) per head (no norm without QK-norm; no RoPE and no norm for values).
  ag::Var heads(const ag::Var& x, const std::string& proj, const std::string& norm, int64_t count,
                const MixerContext& ctx);
  struct Heads {
    ag::Var q, k, v, q_f, k_f, v_f;  // [B, T, H, D]: the in-context and the fading queries, keys and values
  };
  Heads project(const ag::Var& x, const ag::Var& fading, const MixerContext& ctx);
  // The in-context and the fading window's masks for queries after n keys that start at position `first`.
  std::pair<ops::AttentionOptions, ops::AttentionOptions> windows(int64_t first, int64_t n) const;
  ag::Var output(const ag::Var& o);  // o_proj of o [B, T, Hq, D]
  ag::Var forward_sequence_parallel(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in,
                                    MixerState* state_out);

  ModelConfig config_;
  std::string prefix_, attn_;  // attn_: <prefix>.bmojo_attn.
  ParameterRegistry& params_;
  std::unique_ptr<SequenceMixer> ssm_;
  int64_t window_;
};

}  // namespace primer::layers
