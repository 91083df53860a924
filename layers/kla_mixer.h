// Kalman linear attention (the KLA token; Shaj et al. 2026) as a Priming mixer. Per token, with H = max(Hq, Hk)
// heads of size D and N = D state slots per head:
//   q, k, v = silu(short_conv(W x)) (silu(W x) without short convolutions); k, v repeated to H heads (GQA);
//   q, k L2-normalised per head (eps 1e-6 inside the root);
//   Λᵛ = softplus(lv_proj x) + min_precision                          the value precision, per channel
//   a = exp(lambda_log), Δ = softplus(delta) + 1e-7, p = exp(process_noise_log), ā = exp(−aΔ),
//   p̄ = p²(1 − ā²)/(2a)   [H, N, D], per layer
//   y = kalman_scan(q, k, v, Λᵛ; ā, p̄) (core/ops/kalman_scan.h), then the output stage of GDN:
//   o_proj(RMSNorm_D(y) · o_norm ⊙ silu(g_proj x)).
// Where this departs from the authors' block (which has one head, an in_proj/sensor_proj pair, Λᵛ = 1/(softplus + 1e-4)
// and a D-skip), it follows GDN so that Stage 0 can copy W_Q, W_K, W_V, W_O as for GDN: docs/mixers.md lists the
// choices. Parameters under <prefix>: q_proj [Hq·D, d], k_proj, v_proj [Hk·D, d], lv_proj [H·D, d], lambda_log,
// delta, process_noise_log [H, D, D] (f32, no weight decay), {q,k,v}_conv1d.weight [C, 1, conv_size], g_proj [H·D, d]
// (use_gate), o_norm.weight [D], o_proj [d, H·D].
// Carried state: conv = [q, k, v] short-convolution inputs (none without short convolutions), recurrent =
// [λ, η] each [B, H, D, D] in f32 (f64 in references); no state: the prior λ = 1, η = 0.
// The core runs on the CPU and on CUDA (core/ops/cuda/kalman_scan.cu: head_dim a multiple of 16 up to 128).
#pragma once
#include <string>

#include "core/parameters.h"
#include "layers/mixer.h"
#include "layers/state_carry.h"
#include "layers/model_config.h"

namespace primer {
struct MixerSpec;
}

namespace primer::layers {

// The registration of Kalman linear attention (token KLA, module kla, config.json kla_config, recipe section kla).
const MixerSpec& kla_spec();

class KlaMixer : public SequenceMixer {
 public:
  KlaMixer(const ModelConfig& config, const std::string& prefix, ParameterRegistry& params);
  ag::Var forward(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in = nullptr,
                  MixerState* state_out = nullptr) override;
  double flops_per_token(int64_t seq_len) const override;

 private:
  ag::Var branch(const ag::Var& x, const char* name, int64_t heads, size_t slot, const StateCarry& carry);
  ag::Var weight(const std::string& name) { return params_.get(prefix_ + "." + name).var; }

  ModelConfig config_;
  KlaConfig kla_;
  std::string prefix_;
  ParameterRegistry& params_;
  int64_t q_heads_, kv_heads_, heads_, head_dim_;
};

}  // namespace primer::layers
