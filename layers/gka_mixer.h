// Gated KalmaNet (the GKA token of hybrid patterns), as the Priming reference implementation builds it
// (awslabs/hybrid-model-factory; the Gated KalmaNet paper). Per token, with H = max(Hq, Hk) heads
// of size D:
//   q, k, v = silu(short_conv(W x)) (v = W_v x without use_v_conv); k, v repeated to H heads (GQA);
//   q, k L2-normalised per head; β = σ(b_proj x) scales k and v by β + 1e-6 (use_beta_gate);
//   α = σ(alpha_proj x) (use_alpha_connection, else 1); g = −exp(A_log)·softplus(a_proj x + dt_bias) in f32
//   (use_forgetting_gate, else 0), gk = g on the key covariance (use_forgetting_gate_kk, else no decay);
//   x̂ = chebyshev_solve(q, k, gk; ridge_strength, num_iter, bp_lambda): x̂_t ≈ (H_t + λ_t I)⁻¹ q_t with
//       H_t = e^{gk_t} H_{t−1} + k_t k_tᵀ, λ_t = ridge_strength·‖H_t‖_F;
//   q̃ = q + α(x̂ − q);  o = gla(q̃, k, v, g, scale D^-1/2 with gla_rescale, else 1)   (o_t = scale·S_tᵀ q̃_t);
//   y = o_proj(RMSNorm_D(o)·o_norm ⊙ silu(g_proj x))   (plain RMSNorm_D(o)·o_norm without use_gate).
// Parameters under <prefix> (model.layers.<i>.gka): q_proj [Hq·D, d], k_proj [Hk·D, d], v_proj [Hk·D, d],
// a_proj [H, d], b_proj [H, d] + bias (use_beta_gate), alpha_proj [H, d] + bias (use_alpha_connection), A_log [H],
// dt_bias [H], q/k/v_conv1d.weight [C, 1, conv_size] (v only with use_v_conv), g_proj [H·D, d] (use_gate),
// o_norm.weight [D], o_proj [d, H·D].
// Carried state: conv = [q, k, v] short-convolution inputs [B, C, conv_size − 1] (no v without use_v_conv),
// recurrent = [H (the key covariance), S (the readout state)], each [B, H, D, D] in f32 (f64 in f64 references).
// L2 normalisation divides by sqrt(Σx² + 1e-12) where the reference divides by ‖x‖ + 1e-6: the two agree to
// 1e-6/‖x‖ relative (far below bf16's 4e-3 for any key that carries information) and both map 0 to 0.
#pragma once
#include <optional>
#include <string>

#include "core/parameters.h"
#include "layers/kv_expansion.h"
#include "layers/mixer.h"
#include "layers/state_carry.h"
#include "layers/model_config.h"

namespace primer {
struct MixerSpec;
}

namespace primer::layers {

// The registration of Gated KalmaNet (token GKA, module gka, config.json gka_config, recipe section gka).
const MixerSpec& gka_spec();

class GkaMixer : public SequenceMixer {
 public:
  GkaMixer(const ModelConfig& config, const std::string& prefix, ParameterRegistry& params);
  ag::Var forward(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in = nullptr,
                  MixerState* state_out = nullptr) override;
  bool runs_sequence_parallel(ag::RecurrentSequenceMode mode) const override {
    return mode != ag::RecurrentSequenceMode::USP;  // P2P and A2A
  }
  double flops_per_token(int64_t seq_len) const override;

  // The test-time compute knob: Chebyshev iterations of later forward calls (the Priming paper trains at 30 and
  // serves at 5–30). A backward uses the count its forward ran with.
  void set_num_iter(int64_t num_iter);
  int64_t num_iter() const { return gka_.num_iter; }

  // Forward FLOPs per token and head of the solve plus the readout (matrix products of the chunked algorithms).
  static double core_forward_flops(int64_t head_dim, int64_t num_iter);

 private:
  // short_conv(W x) with SiLU as [B, T, heads, D], each head L2-normalised when asked; `slot` indexes the conv states.
  ag::Var branch(const ag::Var& x, const char* name, int64_t heads, size_t slot, const StateCarry& carry,
                 bool l2_normalized);
  // σ(W x + b) + offset per head [B, T, H] in f32 (f64 beside f64), from `projected` = W x (name_proj's weight).
  ag::Var head_gate(const ag::Var& projected, const char* name, double offset = 0.0);
  ag::Var weight(const std::string& name) { return params_.get(prefix_ + "." + name).var; }

  ModelConfig config_;
  GkaConfig gka_;
  std::string prefix_;
  ParameterRegistry& params_;
  int64_t q_heads_, kv_heads_, heads_, head_dim_;
  std::optional<KvExpansion> k_expansion_, v_expansion_;  // Adaptive GQA (kv_proj_rank)
};

}  // namespace primer::layers
