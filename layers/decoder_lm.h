// The decoder language model: embedding, N pre-norm blocks (RMSNorm → mixer → residual → RMSNorm → SwiGLU MLP
// → residual), final RMSNorm, LM head (tied to the embedding or not) and the fused linear + cross-entropy.
// Configured from a Hugging Face config (Qwen3, Llama, Mistral); each layer's mixer comes from the hybrid
// pattern (today `*` = attention; the SSM tokens plug in through layers/mixer.h). Names follow Hugging Face.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/parameters.h"
#include "layers/mixer.h"
#include "layers/model_config.h"

namespace primer::layers {

struct DecoderOptions {
  bool recompute = false;  // activation checkpointing per block
};

class DecoderLM {
 public:
  DecoderLM(const ModelConfig& config, ParameterRegistry& params, DecoderOptions options = {});

  // ids, positions: i32 [B, T] (positions undefined: 0..T-1 per row). Final-norm hidden states [B, T, D].
  ag::Var hidden_states(const Tensor& ids, const Tensor& positions = Tensor());
  // Summed token cross-entropy of next-token targets i32 [B, T] (-100 ignored); gradients are those of
  // grad_scale * loss (see ag::fused_linear_cross_entropy).
  ag::Var loss(const Tensor& ids, const Tensor& targets, double grad_scale, const Tensor& positions = Tensor());
  // f32 logits [B, T, V] without recording (evaluation and parity checks; small inputs only).
  Tensor logits(const Tensor& ids, const Tensor& positions = Tensor());

  // 6·(dense parameters) + attention FLOPs per token at sequence length T, forward + backward (for MFU).
  double flops_per_token(int64_t seq_len) const;
  const ModelConfig& config() const { return config_; }
  std::string head_name() const;  // "lm_head.weight" or the tied embedding

 private:
  ag::Var block(size_t layer, const ag::Var& h, const MixerContext& ctx);
  ag::Var weight(const std::string& name) { return params_.get(name).var; }

  ModelConfig config_;
  ParameterRegistry& params_;
  DecoderOptions options_;
  std::vector<std::unique_ptr<SequenceMixer>> mixers_;
  Tensor inv_freq_cpu_;
};

}  // namespace primer::layers
