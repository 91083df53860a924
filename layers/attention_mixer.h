// Grouped-query softmax attention as in Qwen3/Llama/Mistral: q/k/v projections, optional per-head QK RMSNorm
// (Qwen3), RoPE, causal (optionally sliding-window) flash attention, output projection.
// Parameters: <prefix>.{q,k,v,o}_proj.weight and, with QK-norm, <prefix>.{q,k}_norm.weight.
#pragma once
#include <string>

#include "core/ops/attention.h"
#include "core/parameters.h"
#include "layers/mixer.h"
#include "layers/model_config.h"

namespace primer {
struct MixerSpec;
}

namespace primer::layers {

// The registrations of softmax attention ("*", module self_attn) and sliding-window attention ("SWA", swa).
const MixerSpec& attention_spec();
const MixerSpec& sliding_window_spec();

class AttentionMixer : public SequenceMixer {
 public:
  // window 0: full causal attention; > 0: sliding-window attention (the SWA token of hybrid patterns).
  AttentionMixer(const ModelConfig& config, const std::string& prefix, ParameterRegistry& params, int64_t window = 0);
  ag::Var forward(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in = nullptr,
                  MixerState* state_out = nullptr) override;
  bool runs_sequence_parallel(ag::RecurrentSequenceMode /*mode*/) const override { return true; }
  double flops_per_token(int64_t seq_len) const override;
  // Layer selection swaps one layer at a time to sliding-window attention with the same weights.
  void set_window(int64_t window) { window_ = window; }
  int64_t window() const { return window_; }

 private:
  // Decoding: runs q [B, T, Hq, D] against each row's cache (state_in's, or empty) with k, v appended; the caches go
  // to state_out when given.
  Tensor decode_rows(const Tensor& q, const Tensor& k, const Tensor& v, ops::AttentionOptions opt,
                     const MixerState* state_in, MixerState* state_out) const;
  ag::Var project_heads(const ag::Var& x, const std::string& proj, const std::string& norm, int64_t heads,
                        const MixerContext& ctx, bool rotate);
  ModelConfig config_;
  std::string prefix_;
  ParameterRegistry& params_;
  int64_t window_;
};

}  // namespace primer::layers
