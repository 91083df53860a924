#include "layers/hybrid_config_json.h"

#include <algorithm>
#include <variant>

#include "core/check.h"
#include "layers/mixer_spec.h"

namespace primer {
namespace {

struct HybridFamily {
  const char* base;
  const char* architecture;
};
constexpr HybridFamily kHybridFamilies[] = {{"qwen3", "HybridQwen3ForCausalLM"}, {"llama", "HybridLlamaForCausalLM"}};
constexpr std::string_view kHybridPrefix = "hybrid_";

const HybridFamily* find_hybrid(const std::string& base) {
  for (const HybridFamily& f : kHybridFamilies)
    if (base == f.base) return &f;
  return nullptr;
}

void read_field(const json::Node& block, const MixerField& f, ModelConfig& c) {
  const MixerOption current = f.get(c);
  if (lacks_default(f)) return f.set(c, MixerOption(block.at(f.key).as_int()));
  std::visit(
      [&](const auto& value) {
        using T = std::remove_cvref_t<decltype(value)>;
        if constexpr (std::is_same_v<T, bool>) f.set(c, block.bool_or(f.key, value));
        if constexpr (std::is_same_v<T, int64_t>) f.set(c, block.int_or(f.key, value));
        if constexpr (std::is_same_v<T, double>) f.set(c, block.double_or(f.key, value));
        if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
          const auto v = block.find(f.key);
          f.set(c, v ? std::optional<int64_t>(v->as_int()) : std::nullopt);
        }
        if constexpr (std::is_same_v<T, std::string>) {
          const auto v = block.find(f.key);
          if (!v) return;
          const std::string& name = v->as_string();
          if (std::find(f.choices.begin(), f.choices.end(), name) == f.choices.end()) {
            std::string allowed;
            for (const std::string& choice : f.choices) allowed += (allowed.empty() ? "" : ", ") + choice;
            v->fail("is '" + name + "', expected one of " + allowed);
          }
          f.set(c, name);
        }
      },
      current);
}

json::Value field_json(const MixerOption& value) {
  return std::visit(
      [](const auto& v) -> json::Value {
        using T = std::remove_cvref_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::optional<int64_t>>)
          return v ? json::Value(*v) : json::Value();
        else
          return json::Value(v);
      },
      value);
}

// Whether a layer uses `kind`, as its mixer or inside it (B'MOJO-F's SSM).
bool uses(const ModelConfig& c, MixerKind kind) {
  for (const MixerKind k : c.layer_types) {
    if (k == kind) return true;
    const MixerSpec& spec = mixer_spec(k);
    if (!spec.holds) continue;
    const std::vector<MixerKind> inner = spec.holds(c);
    if (std::find(inner.begin(), inner.end(), kind) != inner.end()) return true;
  }
  return false;
}

}  // namespace

std::string hybrid_base_model_type(const std::string& model_type) {
  if (!model_type.starts_with(kHybridPrefix)) return "";
  return model_type.substr(kHybridPrefix.size());
}

std::string hybrid_model_type(const std::string& base) {
  PRIMER_CHECK(find_hybrid(base), "hybrid models of model_type '{}' are not supported (expected qwen3 or llama)", base);
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
    pattern_node.fail(
        fmt::format("has {} layers, expected num_hidden_layers = {}", pattern.layers.size(), c.num_hidden_layers));
  c.layer_types = pattern.layers;
  c.fused = pattern.fused;

  // Mixers that hold others first: their blocks say which inner mixers' blocks to read.
  for (const bool holders : {true, false})
    for (const MixerSpec* spec : mixer_specs()) {
      if (bool(spec->holds) != holders || !spec->json_block || !uses(c, spec->kind)) continue;
      bool must_exist = false;
      for (const MixerField& f : spec->fields) must_exist |= lacks_default(f);
      const auto block =
          must_exist ? std::optional<json::Node>(root.at(spec->json_block)) : root.find(spec->json_block);
      if (!block) continue;
      if (spec->read_json_extra) spec->read_json_extra(*block, c);
      for (const MixerField& f : spec->fields) read_field(*block, f, c);
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
  for (const MixerSpec* spec : mixer_specs()) {
    if (!spec->json_block || !uses(c, spec->kind)) continue;
    json::Value& block = j[spec->json_block];
    if (spec->write_json_extra) spec->write_json_extra(c, block);
    for (const MixerField& f : spec->fields) block[f.key] = field_json(f.get(c));
  }
}

}  // namespace primer
