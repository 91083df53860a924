#include "layers/hybrid_config_json.h"

#include <algorithm>
#include <variant>

#include "core/check.h"
#include "layers/hybrid_config_fields.h"

namespace primer {
namespace {

struct HybridFamily {
  const char* base;
  const char* architecture;
};
constexpr HybridFamily kHybridFamilies[] = {{"qwen3", "HybridQwen3ForCausalLM"},
                                            {"llama", "HybridLlamaForCausalLM"}};
constexpr std::string_view kHybridPrefix = "hybrid_";

const HybridFamily* find_hybrid(const std::string& base) {
  for (const HybridFamily& f : kHybridFamilies)
    if (base == f.base) return &f;
  return nullptr;
}

template <class C>
void read_fields(const json::Node& block, C& out, const std::vector<ConfigField<C>>& fields) {
  for (const ConfigField<C>& f : fields)
    std::visit(
        [&](auto member) {
          using T = std::remove_cvref_t<decltype(out.*member)>;
          if constexpr (std::is_same_v<T, bool>) out.*member = block.bool_or(f.key, out.*member);
          if constexpr (std::is_same_v<T, int64_t>) out.*member = block.int_or(f.key, out.*member);
          if constexpr (std::is_same_v<T, double>) out.*member = block.double_or(f.key, out.*member);
        },
        f.member);
}

template <class C>
void write_fields(json::Value& block, const C& in, const std::vector<ConfigField<C>>& fields) {
  for (const ConfigField<C>& f : fields) std::visit([&](auto member) { block[f.key] = in.*member; }, f.member);
}

// A block's shape entries must describe the model they sit in (the reference derives them from it).
void expect_equal(const json::Node& block, const char* key, int64_t expected) {
  if (const auto v = block.find(key); v && v->as_int() != expected)
    v->fail(fmt::format("is {}, but the model has {} (mixer shapes different from the attention's are not "
                        "supported)", v->as_int(), expected));
}

void check_heads(const json::Node& block, const ModelConfig& c) {
  expect_equal(block, "hidden_size", c.hidden_size);
  expect_equal(block, "head_dim", c.head_dim);
  expect_equal(block, "num_q_heads", c.num_attention_heads);
  expect_equal(block, "num_k_heads", c.num_key_value_heads);
  expect_equal(block, "num_v_heads", c.num_key_value_heads);
}

void write_heads(json::Value& block, const ModelConfig& c) {
  block["hidden_size"] = c.hidden_size;
  block["head_dim"] = c.head_dim;
  block["num_q_heads"] = c.num_attention_heads;
  block["num_k_heads"] = c.num_key_value_heads;
  block["num_v_heads"] = c.num_key_value_heads;
}

std::optional<int64_t> optional_int(const json::Node& block, const char* key) {
  if (const auto v = block.find(key)) return v->as_int();
  return std::nullopt;
}

json::Value optional_json(const std::optional<int64_t>& v) { return v ? json::Value(*v) : json::Value(); }

bool uses(const ModelConfig& c, MixerKind kind) {
  return std::find(c.layer_types.begin(), c.layer_types.end(), kind) != c.layer_types.end();
}

}  // namespace

std::string hybrid_base_model_type(const std::string& model_type) {
  if (!model_type.starts_with(kHybridPrefix)) return "";
  return model_type.substr(kHybridPrefix.size());
}

std::string hybrid_model_type(const std::string& base) {
  PRIMER_CHECK(find_hybrid(base), "hybrid models of model_type '{}' are not supported (expected qwen3 or llama)",
               base);
  return std::string(kHybridPrefix) + base;
}

std::string hybrid_architecture(const std::string& base) {
  const HybridFamily* f = find_hybrid(base);
  PRIMER_CHECK(f, "hybrid models of model_type '{}' are not supported (expected qwen3 or llama)", base);
  return f->architecture;
}

void parse_hybrid_fields(const json::Node& root, ModelConfig& c) {
  const json::Node pattern_node = root.at("hybrid_override_pattern");
  const HybridPattern pattern =
      parse_any_hybrid_pattern(pattern_node.as_string(), root.source() + ": hybrid_override_pattern");
  if (int64_t(pattern.layers.size()) != c.num_hidden_layers)
    pattern_node.fail(fmt::format("has {} layers, expected num_hidden_layers = {}", pattern.layers.size(),
                                  c.num_hidden_layers));
  c.layer_types = pattern.layers;
  c.fused = pattern.fused;

  if (uses(c, MixerKind::GatedKalmaNet)) {
    if (const auto block = root.find("gka_config")) {
      check_heads(*block, c);
      read_fields(*block, c.gka, gka_fields());
      c.gka.kv_proj_rank = optional_int(*block, "kv_proj_rank");
      if (const auto solver = block->find("solver_type"); solver && solver->as_string() != "chebyshev")
        solver->fail(fmt::format("is '{}', expected chebyshev (the only solver of the reference)",
                                 solver->as_string()));
    }
  }
  if (uses(c, MixerKind::GatedDeltaNet)) {
    if (const auto block = root.find("gdn_config")) {
      check_heads(*block, c);
      read_fields(*block, c.gdn, gdn_fields());
      c.gdn.kv_proj_rank = optional_int(*block, "kv_proj_rank");
    }
  }
  if (uses(c, MixerKind::Mamba2)) {
    if (const auto block = root.find("mamba2_config")) {
      expect_equal(*block, "d_model", c.hidden_size);
      expect_equal(*block, "d_inner", c.num_attention_heads * c.head_dim);
      expect_equal(*block, "d_xb", c.num_key_value_heads * c.head_dim);
      if (const auto ssm = block->find("ssm_cfg")) {
        expect_equal(*ssm, "d_state", c.head_dim);
        expect_equal(*ssm, "ngroups", c.num_attention_heads);
        expect_equal(*ssm, "expand", 1);
      }
      read_fields(*block, c.mamba2, mamba2_fields());
    }
  }
  if (uses(c, MixerKind::SlidingWindow)) {
    const auto block = root.find("swa_config");
    if (!block) root.at("swa_config");  // required: names the missing key
    c.swa.window_size = block->at("window_size").as_int();
  }
}

void write_hybrid_fields(const ModelConfig& c, json::Value& j) {
  j["hybrid_override_pattern"] = format_hybrid_pattern(HybridPattern{c.layer_types, c.fused});
  json::Array types;
  for (size_t i = 0; i < c.layer_types.size(); ++i) {
    const HybridPattern one{{c.layer_types[i]}, c.fused};
    types.push_back(json::Value(format_hybrid_pattern(one)));
  }
  j["layer_types"] = std::move(types);
  if (uses(c, MixerKind::GatedKalmaNet)) {
    json::Value& b = j["gka_config"];
    write_heads(b, c);
    write_fields(b, c.gka, gka_fields());
    b["solver_type"] = "chebyshev";
    b["kv_proj_rank"] = optional_json(c.gka.kv_proj_rank);
    b["conv_bias"] = false;
  }
  if (uses(c, MixerKind::GatedDeltaNet)) {
    json::Value& b = j["gdn_config"];
    write_heads(b, c);
    write_fields(b, c.gdn, gdn_fields());
    b["kv_proj_rank"] = optional_json(c.gdn.kv_proj_rank);
  }
  if (uses(c, MixerKind::Mamba2)) {
    json::Value& b = j["mamba2_config"];
    b["d_model"] = c.hidden_size;
    b["d_inner"] = c.num_attention_heads * c.head_dim;
    b["d_xb"] = c.num_key_value_heads * c.head_dim;
    b["intermediate_size"] = c.intermediate_size;
    b["hidden_act"] = "silu";
    b["rms_norm_eps"] = c.rms_norm_eps;
    b["n_layer"] = c.num_hidden_layers;
    json::Value& ssm = b["ssm_cfg"];
    ssm["expand"] = 1;
    ssm["ngroups"] = c.num_attention_heads;
    ssm["d_state"] = c.head_dim;
    write_fields(b, c.mamba2, mamba2_fields());
  }
  if (uses(c, MixerKind::SlidingWindow)) j["swa_config"]["window_size"] = c.swa.window_size;
}

}  // namespace primer
