#include "layers/mixer_spec.h"

#include "core/check.h"

namespace primer {

const MixerSpec& mixer_spec(MixerKind kind) {
  for (const MixerSpec* spec : mixer_specs())
    if (spec->kind == kind) return *spec;
  PRIMER_FAIL("mixer kind {} is not registered (layers/mixer_registry.cpp)", int(kind));
}

const MixerSpec* find_mixer_spec(const std::string& token) {
  for (const MixerSpec* spec : mixer_specs())
    if (token == spec->token) return spec;
  return nullptr;
}

std::string mixer_tokens(const std::function<bool(const MixerSpec&)>& keep) {
  std::string out;
  for (const MixerSpec* spec : mixer_specs()) {
    if (keep && !keep(*spec)) continue;
    out += (out.empty() ? "" : ", ") + std::string(spec->token);
  }
  return out;
}

bool lacks_default(const MixerField& field) {
  const MixerOption v = field.get(ModelConfig{});
  return std::holds_alternative<int64_t>(v) && std::get<int64_t>(v) < field.minimum;
}

void expect_block_value(const json::Node& block, const char* key, int64_t expected) {
  if (const auto v = block.find(key); v && v->as_int() != expected)
    v->fail(
        fmt::format("is {}, but the model has {} (mixer shapes different from the attention's are not "
                    "supported)",
                    v->as_int(), expected));
}

void check_mixer_heads(const json::Node& block, const ModelConfig& c) {
  expect_block_value(block, "hidden_size", c.hidden_size);
  expect_block_value(block, "head_dim", c.head_dim);
  expect_block_value(block, "num_q_heads", c.num_attention_heads);
  expect_block_value(block, "num_k_heads", c.num_key_value_heads);
  expect_block_value(block, "num_v_heads", c.num_key_value_heads);
}

void write_mixer_heads(const ModelConfig& c, json::Value& block) {
  block["hidden_size"] = c.hidden_size;
  block["head_dim"] = c.head_dim;
  block["num_q_heads"] = c.num_attention_heads;
  block["num_k_heads"] = c.num_key_value_heads;
  block["num_v_heads"] = c.num_key_value_heads;
}

}  // namespace primer
