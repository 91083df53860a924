#include "layers/hybrid_config_json.h"

#include <algorithm>
#include <variant>

#include "core/check.h"

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

// One flag of an options block: its config.json key and the member it binds.
template <class C>
struct Field {
  const char* key;
  std::variant<bool C::*, int64_t C::*, double C::*> member;
};

template <class C>
void read_fields(const json::Node& block, C& out, std::initializer_list<Field<C>> fields) {
  for (const Field<C>& f : fields)
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(out.*member)>;
          if constexpr (std::is_same_v<T, bool>) out.*member = block.bool_or(f.key, out.*member);
          if constexpr (std::is_same_v<T, int64_t>) out.*member = block.int_or(f.key, out.*member);
          if constexpr (std::is_same_v<T, double>) out.*member = block.double_or(f.key, out.*member);
        },
        f.member);
}

template <class C>
void write_fields(json::Value& block, const C& in, std::initializer_list<Field<C>> fields) {
  for (const Field<C>& f : fields) std::visit([&](auto member) { block[f.key] = in.*member; }, f.member);
}

const std::initializer_list<Field<GkaConfig>> kGkaFields = {
    {"use_alpha_connection", &GkaConfig::use_alpha_connection},
    {"use_v_conv", &GkaConfig::use_v_conv},
    {"use_forgetting_gate", &GkaConfig::use_forgetting_gate},
    {"gla_rescale", &GkaConfig::gla_rescale},
    {"bp_lambda", &GkaConfig::bp_lambda},
    {"num_iter", &GkaConfig::num_iter},
    {"ridge_strength", &GkaConfig::ridge_strength},
    {"use_gate", &GkaConfig::use_gate},
    {"conv_size", &GkaConfig::conv_size},
    {"norm_eps", &GkaConfig::norm_eps},
    {"use_forgetting_gate_kk", &GkaConfig::use_forgetting_gate_kk},
    {"use_beta_gate", &GkaConfig::use_beta_gate},
    {"chunk_size", &GkaConfig::chunk_size},
    {"kv_learnable_residual", &GkaConfig::kv_learnable_residual},
};
const std::initializer_list<Field<GdnConfig>> kGdnFields = {
    {"use_gate", &GdnConfig::use_gate},
    {"use_short_conv", &GdnConfig::use_short_conv},
    {"allow_neg_eigval", &GdnConfig::allow_neg_eigval},
    {"conv_size", &GdnConfig::conv_size},
    {"conv_bias", &GdnConfig::conv_bias},
    {"norm_eps", &GdnConfig::norm_eps},
    {"kv_learnable_residual", &GdnConfig::kv_learnable_residual},
};
const std::initializer_list<Field<Mamba2Config>> kMamba2Fields = {
    {"use_qk_norm", &Mamba2Config::use_qk_norm},
    {"use_pos_emb", &Mamba2Config::use_pos_emb},
};

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
      read_fields(*block, c.gka, kGkaFields);
      c.gka.kv_proj_rank = optional_int(*block, "kv_proj_rank");
      if (const auto solver = block->find("solver_type"); solver && solver->as_string() != "chebyshev")
        solver->fail(fmt::format("is '{}', expected chebyshev (the only solver of the reference)",
                                 solver->as_string()));
    }
  }
  if (uses(c, MixerKind::GatedDeltaNet)) {
    if (const auto block = root.find("gdn_config")) {
      check_heads(*block, c);
      read_fields(*block, c.gdn, kGdnFields);
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
      read_fields(*block, c.mamba2, kMamba2Fields);
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
    write_fields(b, c.gka, kGkaFields);
    b["solver_type"] = "chebyshev";
    b["kv_proj_rank"] = optional_json(c.gka.kv_proj_rank);
    b["conv_bias"] = false;
  }
  if (uses(c, MixerKind::GatedDeltaNet)) {
    json::Value& b = j["gdn_config"];
    write_heads(b, c);
    write_fields(b, c.gdn, kGdnFields);
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
    write_fields(b, c.mamba2, kMamba2Fields);
  }
  if (uses(c, MixerKind::SlidingWindow)) j["swa_config"]["window_size"] = c.swa.window_size;
}

}  // namespace primer
