// The hybrid fields of a config.json in the Priming reference's format (model_type hybrid_qwen3 / hybrid_llama,
// hybrid_override_pattern, layer_types and one options block per mixer kind; awslabs/hybrid-model-factory).
// Used by from_hf_json and to_hf_json.
#pragma once
#include "core/io/json.h"
#include "layers/model_config.h"

namespace primer {

// "hybrid_qwen3" → "qwen3" (the decoder family); empty when `model_type` is not a hybrid one.
std::string hybrid_base_model_type(const std::string& model_type);
std::string hybrid_model_type(const std::string& base_model_type);    // "qwen3" → "hybrid_qwen3"
std::string hybrid_architecture(const std::string& base_model_type);  // "qwen3" → "HybridQwen3ForCausalLM"

// Reads hybrid_override_pattern (plain or fused) and the options blocks of the kinds the pattern uses into `c`
// (whose base fields are already parsed). Head counts in a block must match the model's.
void parse_hybrid_fields(const json::Node& root, ModelConfig& c);
// Writes hybrid_override_pattern, layer_types and the options blocks of the kinds in use.
void write_hybrid_fields(const ModelConfig& c, json::Value& j);

}  // namespace primer
