// Mamba-2 in the Mamba-in-Llama mapping of the Priming reference (awslabs/hybrid-model-factory), attention's
// projections reused as SSD's: C ≙ queries (Hq heads), B ≙ keys and x ≙ values (Hkv heads, repeated to Hq),
// d_state = head_dim. Per token, with D = hidden, Dh = head_dim, d_inner = Hq·Dh, d_xb = Hkv·Dh:
//   [z | x | B | C | dt] = in_proj(u)                       widths d_inner, d_xb, d_xb, d_inner, Hq
//   B, C ← per-head RMSNorm (B_norm, C_norm; with use_qk_norm), then RoPE (with use_pos_emb)
//   [x | B | C] ← silu(conv1d([x | B | C]) + bias)          depthwise causal, conv_size taps
//   Δ = softplus(dt + dt_bias),  S_t = exp(−exp(A_log)·Δ_t) S_{t−1} + B_t (Δ_t x_t)ᵀ,  y_t = S_tᵀ C_t + D ⊙ x_t
//   out = out_proj( RMSNorm_per head(y ⊙ silu(z)) · norm.weight )   (gate, then norm; eps mamba2.norm_eps)
// Parameters under <prefix> (= model.layers.<i>.mamba): in_proj.weight [2·d_inner + 2·d_xb + Hq, D],
// conv1d.weight [d_inner + 2·d_xb, 1, conv_size], conv1d.bias, dt_bias [Hq], A_log [Hq], D [Hq], norm.weight
// [d_inner], out_proj.weight [D, d_inner], and with use_qk_norm B_norm.weight, C_norm.weight [Dh].
// Carried state (MixerState): conv = {[B, d_inner + 2·d_xb, conv_size − 1] conv inputs, in x's dtype},
// recurrent = {S f32 [B, Hq, Dh (state, from B), Dh (from x)]}.
#pragma once
#include <string>

#include "core/parameters.h"
#include "layers/mixer.h"
#include "layers/model_config.h"

namespace primer {
struct MixerSpec;
}

namespace primer::layers {

// The registration of Mamba-2 (token M2, module mamba, config.json mamba2_config, recipe section mamba2).
const MixerSpec& mamba2_spec();

class Mamba2Mixer : public SequenceMixer {
 public:
  Mamba2Mixer(const ModelConfig& config, const std::string& prefix, ParameterRegistry& params);
  ag::Var forward(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in = nullptr,
                  MixerState* state_out = nullptr) override;
  bool runs_sequence_parallel(ag::RecurrentSequenceMode mode) const override {
    return mode != ag::RecurrentSequenceMode::USP;  // P2P and A2A
  }
  double flops_per_token(int64_t seq_len) const override;

 private:
  ag::Var weight(const std::string& name) { return params_.get(prefix_ + name).var; }
  // B or C [B, T, heads·Dh] → [B, T, heads, Dh], after their per-head RMSNorm and RoPE (each when enabled).
  ag::Var key_or_query(const ag::Var& x, const std::string& norm, int64_t heads, const Tensor& positions,
                       const Tensor& inv_freq);

  ModelConfig config_;
  std::string prefix_;
  ParameterRegistry& params_;
  int64_t heads_, kv_heads_, head_dim_, d_inner_, d_xb_;
};

}  // namespace primer::layers
