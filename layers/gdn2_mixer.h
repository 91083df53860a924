// Gated DeltaNet-2 (the GDN2 token; Hatamizadeh, Choi and Kautz, "Gated DeltaNet-2: Decoupling Erase and Write in
// Linear Attention", NVIDIA 2026) as a Priming mixer. Per token, with H = max(Hq, Hk) heads of size D:
//   q, k, v = silu(short_conv(W x)) (silu(W x) without short convolutions); k, v repeated to H heads (GQA as GDN);
//   q, k L2-normalised per head (eps 1e-6 inside the root);
//   g = −exp(A_log)[head] · softplus(f_proj.1(f_proj.0 x) + dt_bias)   per key channel, in f32 (rank-D decay
//       projection, the authors' code);
//   b = σ(b_proj x) per key channel (×2 with allow_neg_eigval), w = σ(w_proj x) per value channel; with kda_gates
//       (Kimi Delta Attention) one gate per head for both, b = w = β = σ(b_proj x) (×2 with allow_neg_eigval);
//   o = gated delta rule-2 (q, k, v, g, b, w; scale D^-1/2) per head (core/ops/gated_delta_rule2.h);
//   y = o_proj(RMSNorm_D(o) · o_norm ⊙ silu(g_proj x))   (plain RMSNorm without use_gate).
// The output gate is GDN's full-rank g_proj (the paper's W_g; the authors' code uses a low-rank gate with a bias), so
// that Stage 0 initialises it from W_O and W_V as for GDN: docs/mixers.md lists the choices.
// Parameters under <prefix> (model.layers.<i>.gdn2): q_proj [Hq·D, d], k_proj, v_proj [Hk·D, d], b_proj, w_proj
// [H·D, d] (kda_gates: b_proj [H, d] alone), f_proj.0 [D, d], f_proj.1 [H·D, D], A_log [H], dt_bias [H·D] (f32, no
// weight decay), {q,k,v}_conv1d.weight [C, 1, conv_size] (+ .bias with conv_bias), g_proj [H·D, d] (use_gate),
// o_norm.weight [D], o_proj [d, H·D]. Carried state: conv = [q, k, v] short-convolution inputs [B, C, conv_size − 1]
// (none without short convolutions), recurrent = [S [B, H, D, D]] in f32 (f64 in f64 references).
#pragma once
#include <string>

#include "core/parameters.h"
#include "layers/mixer.h"
#include "layers/model_config.h"
#include "layers/state_carry.h"

namespace primer {
struct MixerSpec;
}

namespace primer::layers {

// The registration of Gated DeltaNet-2 (token GDN2, module gdn2, config.json gdn2_config, recipe section gdn2).
const MixerSpec& gdn2_spec();

class Gdn2Mixer : public SequenceMixer {
 public:
  Gdn2Mixer(const ModelConfig& config, const std::string& prefix, ParameterRegistry& params);
  ag::Var forward(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in = nullptr,
                  MixerState* state_out = nullptr) override;
  bool runs_sequence_parallel(ag::RecurrentSequenceMode mode) const override {
    return mode != ag::RecurrentSequenceMode::USP;  // P2P and A2A: the recurrence is linear in the state
  }
  double flops_per_token(int64_t seq_len) const override;

 private:
  ag::Var branch(const ag::Var& x, const char* name, int64_t heads, size_t slot, const StateCarry& carry);
  ag::Var weight(const std::string& name) { return params_.get(prefix_ + "." + name).var; }

  ModelConfig config_;
  Gdn2Config gdn2_;
  std::string prefix_;
  ParameterRegistry& params_;
  int64_t q_heads_, kv_heads_, heads_, head_dim_;
};

}  // namespace primer::layers
