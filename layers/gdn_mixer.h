// Gated DeltaNet (the GDN token of hybrid patterns), exactly as the Priming reference implementation builds it
// (awslabs/hybrid-model-factory). Per token, with H = max(Hq, Hk) heads of size D:
//   q, k, v = silu(short_conv(W x)) (silu(W x) without short convolutions); q, k L2-normalised per head (eps 1e-6
//   inside the root; in the conv's pass); k, v shared by groups of H / Hk heads (GQA, read in place by the core), or
//   expanded to H heads by Adaptive GQA with kv_proj_rank (layers/kv_expansion.h) before k's norm;
//   β = σ(b_proj x) (×2 with allow_neg_eigval), g = −exp(A_log) · softplus(gk_proj x + dt_bias) in f32;
//   o = gated delta rule(q, k, v, g, β, scale D^-1/2) per head;
//   y = o_proj(RMSNorm_D(o) · o_norm ⊙ silu(g_proj x))   (plain RMSNorm without use_gate).
// Parameters under <prefix> (model.layers.<i>.gdn): q_proj [Hq·D, d], k_proj [Hk·D, d], v_proj [Hk·D, d],
// b_proj [H, d], gk_proj [H, d], A_log [H], dt_bias [H], {q,k,v}_conv1d.weight [C, 1, conv_size] (+ .bias with
// conv_bias), g_proj [H·D, d] (use_gate), o_norm.weight [D], o_proj [d, H·D]; with kv_proj_rank, the
// Adaptive GQA parameters proj_k.*, proj_v.* (and k_rep, v_rep with kv_learnable_residual).
// KZLA (Kaczmarz linear attention; Zou, Ren and Liu 2026) is the same layer with DeltaStep::Kaczmarz: k is not
// normalised and the core's step is β = η/(‖k‖² + 1e-6) with η = σ(b_proj x) (×2 with allow_neg_eigval)
// (ag::kaczmarz_delta_rule); options from ModelConfig::kzla, parameters under model.layers.<i>.kzla with GDN's names.
// Carried state: conv = [q, k, v] short-convolution inputs [B, C, conv_size − 1] (none without short
// convolutions), recurrent = [S [B, H, D, D]] in f32 (f64 in f64 references).
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

// The registration of Gated DeltaNet (token GDN, module gdn, config.json gdn_config, recipe section gdn).
const MixerSpec& gdn_spec();
// The registration of Kaczmarz linear attention (token KZLA, module kzla, config.json kzla_config, recipe kzla).
const MixerSpec& kzla_spec();

// The delta rule's step size: Gated DeltaNet's β on L2-normalised keys, or the Kaczmarz step on raw keys.
enum class DeltaStep { Gated, Kaczmarz };

class GdnMixer : public SequenceMixer {
 public:
  GdnMixer(const ModelConfig& config, const std::string& prefix, ParameterRegistry& params,
           DeltaStep step = DeltaStep::Gated);
  ag::Var forward(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in = nullptr,
                  MixerState* state_out = nullptr) override;
  bool runs_sequence_parallel(ag::RecurrentSequenceMode mode) const override {
    return mode != ag::RecurrentSequenceMode::USP;  // P2P and A2A
  }
  double flops_per_token(int64_t seq_len) const override;

  // Forward FLOPs per token and head of the chunked gated delta rule (its matrix products), and of its backward
  // as our kernels run it (recomputing the forward's chunk quantities and states).
  static double core_forward_flops(int64_t key_dim, int64_t value_dim);
  static double core_backward_flops(int64_t key_dim, int64_t value_dim);

 private:
  // silu(short_conv(W x)) as [B, T, heads, D], each head L2-normalised when asked; `slot` indexes the conv states.
  ag::Var branch(const ag::Var& x, const char* name, int64_t heads, size_t slot, const StateCarry& carry,
                 bool l2_normalized);
  ag::Var weight(const std::string& name) { return params_.get(prefix_ + "." + name).var; }

  ModelConfig config_;
  DeltaStep step_;
  GdnConfig gdn_;  // c.gdn, or c.kzla for the Kaczmarz step
  std::string prefix_;
  ParameterRegistry& params_;
  int64_t q_heads_, kv_heads_, heads_, head_dim_;
  std::optional<KvExpansion> k_expansion_, v_expansion_;  // Adaptive GQA (kv_proj_rank)
};

}  // namespace primer::layers
