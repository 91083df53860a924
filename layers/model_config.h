// The shape of a decoder LM (Qwen3, Llama, Mistral), read from and written to a Hugging Face config.json.
// Reads both the transformers-4 spelling (rope_theta, rope_scaling) and the transformers-5 one
// (rope_parameters: {rope_type, rope_theta, factor, ...}); writes the transformers-4 spelling, which both
// versions load. See docs/formats.md for the field mapping.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/io/json.h"
#include "core/tensor.h"
#include "layers/hybrid_config.h"

namespace primer {

struct RopeScaling {
  enum class Type { None, Llama3 };
  Type type = Type::None;
  // Llama 3.1 frequency-dependent interpolation.
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;

  bool operator==(const RopeScaling&) const = default;
};

struct ModelConfig {
  std::string model_type;  // "qwen3", "llama", "mistral"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless given
  double rms_norm_eps = 1e-6;
  double initializer_range = 0.02;  // std of the normal init of projections and embeddings
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // bias on q, k, v and o projections
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
  int64_t sliding_window = 0;   // 0: full attention in every layer
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // config.json allows one id or a list
  DType torch_dtype = DType::BF16;     // dtype of the released weights

  // Hybrid models: one mixer per layer (empty: attention everywhere, a plain Transformer) and the options of
  // each mixer kind the pattern uses.
  std::vector<MixerKind> layer_types;
  // Stage 0/1 fused teacher-student model: every layer also keeps the teacher's attention (`self_attn`), run on
  // a second, gradient-free residual stream (pattern tokens "*DA" and "X*").
  bool fused = false;
  GkaConfig gka;
  GdnConfig gdn;
  KzlaConfig kzla;
  KlaConfig kla;
  Gdn2Config gdn2;
  Mamba2Config mamba2;
  SwaConfig swa;
  BmojoConfig bmojo;
  MixerKind mixer(int64_t layer) const {
    return layer_types.empty() ? MixerKind::Attention : layer_types[size_t(layer)];
  }

  // Checks internal consistency; errors name `source` and the offending field.
  void validate(const std::string& source = "ModelConfig") const;
  bool operator==(const ModelConfig&) const = default;
};

// Parses a config.json document (Qwen3, Llama, Mistral, and the Priming reference's hybrid_qwen3 / hybrid_llama
// with hybrid_override_pattern and gka_config / gdn_config / mamba2_config / swa_config); errors name `source`
// (the file) and the key. Calls validate().
ModelConfig from_hf_json(const json::Value& config, const std::string& source);
ModelConfig load_hf_config(const std::string& path);  // parse_file + from_hf_json

// Every top-level config.json key primer reads or writes (the hybrid blocks included), and the keys of the supported
// families' released configs that it ignores (transformers_version, use_cache, ...). from_hf_json ignores any other
// key, as transformers does; a hand-written config (a recipe's model_config) is checked against this list.
const std::vector<std::string>& hf_config_keys();

// A config.json that transformers loads into <Arch>ForCausalLM (architectures, model_type and the fields above);
// a hybrid model (layer_types set) is written in the reference's format, which its Hugging Face code and vLLM
// plugin load (awslabs/hybrid-model-factory).
json::Value to_hf_json(const ModelConfig& config);

// RoPE inverse frequencies f32 [head_dim/2] on the CPU: theta^(-2i/head_dim), with the Llama-3 scaling applied
// when configured. Computed in double and rounded once (transformers computes in f32; the two agree to
// ~1 ulp).
Tensor rope_inv_freq_for(const ModelConfig& config);

}  // namespace primer
