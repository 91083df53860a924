// ShortConvLM: the small decoder that primer trains on its built-in default until the attention and SSM
// mixers land. Each block is pre-RMSNorm → causal depthwise conv (SiLU) → output projection → residual →
// pre-RMSNorm → SwiGLU MLP → residual; then a final RMSNorm and an LM head tied to the embedding, trained
// with the fused linear + cross-entropy. Parameter names follow the Hugging Face decoder convention.
#pragma once
#include "core/autograd/variable.h"
#include "core/parameters.h"

namespace primer::layers {

struct ShortConvLMConfig {
  int64_t vocab = 256;
  int64_t hidden = 256;
  int64_t layers = 4;
  int64_t ffn = 768;
  int64_t conv_size = 4;
  double norm_eps = 1e-6;
  bool recompute = false;  // activation checkpointing per block
};

class ShortConvLM {
 public:
  ShortConvLM(const ShortConvLMConfig& config, ParameterRegistry& params);
  // ids, targets: i32 [B, T] on the parameters' device; targets < 0 are ignored. Returns the summed token loss;
  // gradients (when recorded) are those of grad_scale * loss.
  ag::Var loss(const Tensor& ids, const Tensor& targets, double grad_scale);
  // 6·N FLOPs per token for forward + backward (the dense-matmul count used for MFU).
  double flops_per_token() const;

 private:
  ag::Var block(int64_t layer, const ag::Var& h);
  ag::Var weight(const std::string& name) { return params_.get(name).var; }

  ShortConvLMConfig config_;
  ParameterRegistry& params_;
};

}  // namespace primer::layers
