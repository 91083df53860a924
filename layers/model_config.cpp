#include "layers/model_config.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/check.h"
#include "core/ops/rope.h"
#include "layers/hybrid_config_json.h"
#include "layers/mixer_spec.h"

namespace primer {
namespace {

struct Family {
  const char* model_type;
  const char* architecture;
};
constexpr Family kFamilies[] = {
    {"qwen3", "Qwen3ForCausalLM"}, {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}};

const Family* find_family(const std::string& model_type) {
  for (const Family& f : kFamilies)
    if (model_type == f.model_type) return &f;
  return nullptr;
}

struct HfDType {
  const char* name;
  DType dtype;
};
constexpr HfDType kHfDTypes[] = {{"bfloat16", DType::BF16}, {"float32", DType::F32}, {"float16", DType::F16}};

DType parse_dtype(const json::Node& node) {
  for (const HfDType& d : kHfDTypes)
    if (node.as_string() == d.name) return d.dtype;
  node.fail(fmt::format("expected bfloat16, float32 or float16, got '{}'", node.as_string()));
}

const char* hf_dtype_name(DType dtype) {
  for (const HfDType& d : kHfDTypes)
    if (d.dtype == dtype) return d.name;
  PRIMER_FAIL("to_hf_json: torch_dtype {} has no config.json spelling (expected bf16, f32 or f16)", dtype_name(dtype));
}

// transformers 5 nests the RoPE settings in rope_parameters (with rope_theta inside); transformers 4 has a
// top-level rope_theta and an optional rope_scaling (whose type key is "rope_type", or "type" in old files).
void parse_rope(const json::Node& root, ModelConfig& c) {
  std::optional<json::Node> scaling = root.find("rope_parameters");
  if (scaling && scaling->has("rope_theta")) {
    c.rope_theta = scaling->at("rope_theta").as_double();
  } else {
    c.rope_theta = root.double_or("rope_theta", 10000.0);
    if (!scaling) scaling = root.find("rope_scaling");
  }
  if (!scaling) return;
  const char* type_key = scaling->has("rope_type") || !scaling->has("type") ? "rope_type" : "type";
  const std::string type = scaling->string_or(type_key, "default");
  if (type == "default") return;
  if (type != "llama3")
    scaling->at(type_key).fail(fmt::format("unsupported rope_type '{}' (expected default or llama3)", type));
  RopeScaling& s = c.rope_scaling;
  s.type = RopeScaling::Type::Llama3;
  s.factor = scaling->at("factor").as_double();
  s.low_freq_factor = scaling->at("low_freq_factor").as_double();
  s.high_freq_factor = scaling->at("high_freq_factor").as_double();
  s.original_max_position_embeddings = scaling->at("original_max_position_embeddings").as_int();
}

}  // namespace

ModelConfig from_hf_json(const json::Value& config, const std::string& source) {
  const json::Node root(config, source);
  ModelConfig c;
  const json::Node model_type = root.at("model_type");
  c.model_type = model_type.as_string();
  const std::string hybrid_base = hybrid_base_model_type(c.model_type);
  if (!hybrid_base.empty()) c.model_type = hybrid_base;
  if (!find_family(c.model_type) || (!hybrid_base.empty() && c.model_type == "mistral"))
    model_type.fail(
        fmt::format("unsupported model_type '{}' (expected qwen3, llama, mistral, hybrid_qwen3 or "
                    "hybrid_llama)",
                    model_type.as_string()));
  if (const auto act = root.find("hidden_act"); act && act->as_string() != "silu")
    act->fail(fmt::format("unsupported activation '{}' (the MLP is SwiGLU: expected silu)", act->as_string()));
  if (root.bool_or("mlp_bias", false)) root.at("mlp_bias").fail("MLP biases are not supported (expected false)");

  c.vocab_size = root.at("vocab_size").as_int();
  c.hidden_size = root.at("hidden_size").as_int();
  c.intermediate_size = root.at("intermediate_size").as_int();
  c.num_hidden_layers = root.at("num_hidden_layers").as_int();
  c.num_attention_heads = root.at("num_attention_heads").as_int();
  c.num_key_value_heads = root.int_or("num_key_value_heads", c.num_attention_heads);
  if (const auto head_dim = root.find("head_dim")) {
    c.head_dim = head_dim->as_int();
  } else {
    if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0)
      root.at("num_attention_heads")
          .fail(fmt::format("{} does not divide hidden_size {} and no head_dim is given", c.num_attention_heads,
                            c.hidden_size));
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.rms_norm_eps = root.double_or("rms_norm_eps", 1e-6);
  c.initializer_range = root.double_or("initializer_range", 0.02);
  c.max_position_embeddings = root.at("max_position_embeddings").as_int();
  c.tie_word_embeddings = root.bool_or("tie_word_embeddings", false);
  c.attention_bias = root.bool_or("attention_bias", false);
  c.qk_norm = c.model_type == "qwen3";
  parse_rope(root, c);

  if (c.model_type == "qwen3") {
    // Qwen3 keeps a sliding_window value around but applies it only with use_sliding_window.
    if (root.bool_or("use_sliding_window", false))
      root.at("use_sliding_window").fail("sliding-window layers of Qwen3 are not supported (expected false)");
  } else if (c.model_type == "mistral") {
    c.sliding_window = root.int_or("sliding_window", 0);
  }

  if (const auto bos = root.find("bos_token_id")) c.bos_token_id = bos->as_int();
  if (const auto eos = root.find("eos_token_id")) {
    if (eos->type() == json::Type::Array) {
      for (size_t i = 0; i < eos->size(); ++i) c.eos_token_ids.push_back(eos->at(i).as_int());
    } else {
      c.eos_token_ids.push_back(eos->as_int());
    }
  }
  const auto dtype = root.find("dtype") ? root.find("dtype") : root.find("torch_dtype");  // transformers 5 : 4
  if (dtype) c.torch_dtype = parse_dtype(*dtype);
  if (!hybrid_base.empty()) {
    parse_hybrid_fields(root, c);
  } else {
    // A hybrid's keys under a plain model_type would leave a Transformer without a word: refuse them.
    std::vector<const char*> hybrid_keys = {"hybrid_override_pattern"};
    for (const MixerSpec* spec : mixer_specs())
      if (spec->json_block) hybrid_keys.push_back(spec->json_block);
    for (const char* key : hybrid_keys)
      if (const auto node = root.find(key))
        node->fail(fmt::format("is a hybrid's key, but model_type is '{}' (a hybrid's is hybrid_{})", c.model_type,
                               c.model_type));
  }
  c.validate(source);
  return c;
}

ModelConfig load_hf_config(const std::string& path) { return from_hf_json(json::parse_file(path), path); }

const std::vector<std::string>& hf_config_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = {
        // read by from_hf_json
        "model_type", "hidden_act", "mlp_bias", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "initializer_range",
        "max_position_embeddings", "tie_word_embeddings", "attention_bias", "rope_parameters", "rope_theta",
        "rope_scaling", "use_sliding_window", "sliding_window", "bos_token_id", "eos_token_id", "dtype", "torch_dtype",
        "hybrid_override_pattern",
        // written by to_hf_json
        "architectures", "attention_dropout", "use_cache", "layer_types",
        // in the released Qwen3 / Llama / Mistral configs, without effect here
        "transformers_version", "max_window_layers", "pad_token_id", "pretraining_tp", "_name_or_path"};
    for (const MixerSpec* spec : mixer_specs())
      if (spec->json_block) k.push_back(spec->json_block);
    return k;
  }();
  return keys;
}

void ModelConfig::validate(const std::string& source) const {
  PRIMER_CHECK(find_family(model_type), "{}: model_type '{}' is not one of qwen3, llama, mistral", source, model_type);
  const std::pair<const char*, int64_t> positive[] = {
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"max_position_embeddings", max_position_embeddings},
  };
  for (const auto& [name, value] : positive) PRIMER_CHECK(value > 0, "{}: {} is {}, expected > 0", source, name, value);
  PRIMER_CHECK(num_attention_heads % num_key_value_heads == 0,
               "{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", source,
               num_attention_heads, num_key_value_heads);
  PRIMER_CHECK(head_dim > 0 && head_dim % 2 == 0, "{}: head_dim is {}, expected a positive even number (RoPE pairs)",
               source, head_dim);
  PRIMER_CHECK(rms_norm_eps > 0, "{}: rms_norm_eps is {}, expected > 0", source, rms_norm_eps);
  PRIMER_CHECK(initializer_range > 0, "{}: initializer_range is {}, expected > 0", source, initializer_range);
  PRIMER_CHECK(rope_theta > 0, "{}: rope_theta is {}, expected > 0", source, rope_theta);
  PRIMER_CHECK(sliding_window >= 0, "{}: sliding_window is {}, expected >= 0 (0: none)", source, sliding_window);
  if (rope_scaling.type == RopeScaling::Type::Llama3) {
    const RopeScaling& s = rope_scaling;
    PRIMER_CHECK(s.factor >= 1, "{}: rope_scaling.factor is {}, expected >= 1", source, s.factor);
    PRIMER_CHECK(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor,
                 "{}: rope_scaling has low_freq_factor {} and high_freq_factor {}, expected 0 < low < high", source,
                 s.low_freq_factor, s.high_freq_factor);
    PRIMER_CHECK(s.original_max_position_embeddings > 0,
                 "{}: rope_scaling.original_max_position_embeddings is {}, expected > 0", source,
                 s.original_max_position_embeddings);
  }
  auto check_token = [&](const char* key, int64_t id) {
    PRIMER_CHECK(id >= 0 && id < vocab_size, "{}: {} {} is outside the vocabulary [0, {})", source, key, id,
                 vocab_size);
  };
  if (bos_token_id) check_token("bos_token_id", *bos_token_id);
  for (const int64_t id : eos_token_ids) check_token("eos_token_id", id);
  PRIMER_CHECK(!fused || !layer_types.empty(), "{}: a fused teacher-student model needs a hybrid pattern", source);
  PRIMER_CHECK(layer_types.empty() || int64_t(layer_types.size()) == num_hidden_layers,
               "{}: the hybrid pattern has {} layers, expected num_hidden_layers = {}", source, layer_types.size(),
               num_hidden_layers);
  for (const MixerSpec* spec : mixer_specs())
    if (spec->validate && std::find(layer_types.begin(), layer_types.end(), spec->kind) != layer_types.end())
      spec->validate(*this, source);
}

json::Value to_hf_json(const ModelConfig& c) {
  c.validate("to_hf_json");
  json::Value j;
  const bool hybrid = !c.layer_types.empty();
  j["architectures"] =
      json::Array{json::Value(hybrid ? hybrid_architecture(c.model_type) : find_family(c.model_type)->architecture)};
  j["model_type"] = hybrid ? hybrid_model_type(c.model_type) : c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["initializer_range"] = c.initializer_range;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.type == RopeScaling::Type::Llama3) {
    json::Value& s = j["rope_scaling"];
    s["rope_type"] = "llama3";
    s["factor"] = c.rope_scaling.factor;
    s["low_freq_factor"] = c.rope_scaling.low_freq_factor;
    s["high_freq_factor"] = c.rope_scaling.high_freq_factor;
    s["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (c.model_type != "mistral") j["attention_bias"] = c.attention_bias;  // MistralConfig has no such option
  j["attention_dropout"] = 0.0;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.model_type == "qwen3") j["use_sliding_window"] = false;
  if (c.model_type != "llama")
    j["sliding_window"] = c.sliding_window > 0 ? json::Value(c.sliding_window) : json::Value();
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (!c.eos_token_ids.empty()) {
    json::Array ids(c.eos_token_ids.begin(), c.eos_token_ids.end());
    j["eos_token_id"] = std::move(ids);
  }
  j["torch_dtype"] = hf_dtype_name(c.torch_dtype);
  j["use_cache"] = true;
  if (hybrid) write_hybrid_fields(c, j);
  return j;
}

Tensor rope_inv_freq_for(const ModelConfig& c) {
  if (c.rope_scaling.type == RopeScaling::Type::None) return ops::rope_inv_freq(c.head_dim, c.rope_theta);
  // Llama 3.1: keep high frequencies (wavelength below original_context / high_freq_factor), divide low ones
  // (wavelength above original_context / low_freq_factor) by `factor`, and blend linearly in between.
  const RopeScaling& s = c.rope_scaling;
  const double context = double(s.original_max_position_embeddings);
  const double low_freq_wavelen = context / s.low_freq_factor, high_freq_wavelen = context / s.high_freq_factor;
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double inv = std::pow(c.rope_theta, -2.0 * double(i) / double(c.head_dim));  // as ops::rope_inv_freq
    const double wavelen = 2 * std::numbers::pi / inv;
    double scaled = inv;
    if (wavelen > low_freq_wavelen) {
      scaled = inv / s.factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      scaled = (1 - smooth) * inv / s.factor + smooth * inv;
    }
    inv_freq[size_t(i)] = float(scaled);
  }
  return Tensor::from_vector(inv_freq, {half}, DType::F32);
}

}  // namespace primer
