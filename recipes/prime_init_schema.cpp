#include "recipes/prime_init_schema.h"

#include <variant>

#include "core/check.h"
#include "layers/mixer_spec.h"

namespace primer::recipes {
namespace {

// One schema field per option of a mixer, under its recipe section, defaulting to ModelConfig's default; a count
// with no usable default (and an unset-able count) is optional.
void add_block(config::Schema& s, const MixerSpec& spec) {
  const ModelConfig defaults;
  for (const MixerField& f : spec.fields) {
    const std::string key = std::string(spec.recipe_section) + "." + f.key;
    std::visit(
        [&](const auto& value) {
          using T = std::remove_cvref_t<decltype(value)>;
          if constexpr (std::is_same_v<T, bool>) s.add_bool(key, f.doc).defaults(value);
          if constexpr (std::is_same_v<T, int64_t>) {
            config::Field& field = s.add_int(key, f.doc).at_least(double(f.minimum));
            if (lacks_default(f))
              field.optional();
            else
              field.defaults(value);
          }
          if constexpr (std::is_same_v<T, double>) s.add_float(key, f.doc).above(0).defaults(value);
          if constexpr (std::is_same_v<T, std::optional<int64_t>>)
            s.add_int(key, f.doc).at_least(double(f.minimum)).optional();
          if constexpr (std::is_same_v<T, std::string>) s.add_enum(key, f.choices, f.doc).defaults(value);
        },
        f.get(defaults));
  }
}

void read_block(const config::Config& cfg, const MixerSpec& spec, ModelConfig& c) {
  for (const MixerField& f : spec.fields) {
    const std::string key = std::string(spec.recipe_section) + "." + f.key;
    std::visit(
        [&](const auto& value) {
          using T = std::remove_cvref_t<decltype(value)>;
          if constexpr (std::is_same_v<T, bool>) f.set(c, cfg.get_bool(key));
          if constexpr (std::is_same_v<T, int64_t>) {
            if (cfg.has(key)) f.set(c, cfg.get_int(key));
          }
          if constexpr (std::is_same_v<T, double>) f.set(c, cfg.get_float(key));
          if constexpr (std::is_same_v<T, std::optional<int64_t>>)
            f.set(c, cfg.has(key) ? std::optional<int64_t>(cfg.get_int(key)) : std::nullopt);
          if constexpr (std::is_same_v<T, std::string>) f.set(c, cfg.get_string(key));
        },
        f.get(c));
  }
}

std::vector<std::string> convertible_tokens() {
  std::vector<std::string> tokens;
  for (const MixerSpec* spec : mixer_specs())
    if (spec->kind != MixerKind::Attention) tokens.push_back(spec->token);
  return tokens;
}

config::Schema build_prime_init_schema() {
  config::Schema s;
  s.add_string("base_model_name_or_path", "Hugging Face checkpoint directory of the source Transformer").required();
  s.add_string("hybrid_override_pattern",
               "Per-layer tokens, '-'-separated: fused (*DA, GKA*, GDN*, ...) or plain (*, GKA, ...; converted "
               "to fused); mixers: " +
                   mixer_tokens())
      .optional();
  s.add_float("hybrid_ratio", "Instead of a pattern: the fraction of layers that become ssm_mixer layers")
      .at_least(0)
      .at_most(1)
      .optional();
  s.add_enum("ssm_mixer", convertible_tokens(), "The mixer of the converted layers (with hybrid_ratio)")
      .defaults("GKA");
  s.add_string("importance_scores",
               "With hybrid_ratio: a `primer select-layers` CSV; the least important layers are converted "
               "(selective). Unset: the uniform pattern")
      .optional();
  s.add_string("output_dir", "Where the fused hybrid checkpoint is written (config.json + safetensors)").required();
  s.add_enum("dtype", {"bf16", "bfloat16", "fp16", "float16", "fp32", "float32"}, "dtype of the written weights")
      .defaults("bf16");
  s.add_bool("copy_auxiliary_files",
             "Also copy the base directory's other non-weight files (tokenizer files are always copied)")
      .defaults(false);
  s.add_enum("gate_init", {"headwise", "rowwise"},
             "W_G = 0.5·(W_Oᵀ + W_V expanded to every query head): headwise repeats whole heads (the paper); "
             "rowwise repeats single rows (the reference code)")
      .defaults("headwise");
  s.add_int("seed", "Seed of the random initialisation of the new parameters").at_least(0).defaults(42);
  for (const MixerSpec* spec : mixer_specs())
    if (spec->recipe_section) add_block(s, *spec);
  s.add_check([](const config::Config& cfg) {
    PRIMER_CHECK(cfg.has("hybrid_override_pattern") != cfg.has("hybrid_ratio"),
                 "{}: set exactly one of 'hybrid_override_pattern' and 'hybrid_ratio'", cfg.path());
    PRIMER_CHECK(!cfg.has("importance_scores") || cfg.has("hybrid_ratio"),
                 "{}: 'importance_scores' ({}) needs 'hybrid_ratio'", cfg.path(), cfg.where("importance_scores"));
  });
  return s;
}

}  // namespace

const config::Schema& prime_init_schema() {
  static const config::Schema schema = build_prime_init_schema();
  return schema;
}

void apply_mixer_options(const config::Config& cfg, ModelConfig& c) {
  for (const MixerSpec* spec : mixer_specs())
    if (spec->recipe_section) read_block(cfg, *spec, c);
}

std::string prime_init_reference() {
  return R"(# Stage 0 reference: `primer prime-init stage0.yaml`

<!-- Generated by primer::recipes::prime_init_reference() from recipes/prime_init_schema.cpp; do not edit.
     Regenerate: PRIMER_UPDATE_DOCS=1 build/tests/primer_tests --gtest_filter='PrimeInit.DocsAreUpToDate' -->

Stage 0 turns a Hugging Face Transformer (Qwen3, Llama) into a **fused** hybrid checkpoint: every layer the
pattern converts gets a new sequence mixer (the student) next to the layer's attention (the frozen teacher),
and every other layer keeps its attention for both streams. Stage 1 (`primer train` with `stage: hkd`) trains
the students to match the teacher; `primer unfuse` then drops the teacher attention.

What is copied and what is initialised, per converted layer (the Priming paper's Table 17, and the reference
implementation's names):

| mixer | from the layer's attention | initialised as the reference does |
|---|---|---|
| GKA, GDN, KZLA | `q_proj ← W_Q`, `k_proj ← W_K`, `v_proj ← W_V`, `o_proj ← W_O`, `g_proj ← 0.5·(W_Oᵀ + expand(W_V))` | gate, β, α projections, `A_log`, `dt_bias`, short convs, `o_norm` |
| KLA | the same as GKA, GDN, KZLA (by analogy: no published rule) | `lv_proj`, `lambda_log`, `delta`, `process_noise_log`, short convs, `o_norm` |
| GDN2 | the same as GKA, GDN, KZLA (by analogy: no published rule) | `b_proj`, `w_proj`, `f_proj.0`, `f_proj.1`, `A_log`, `dt_bias`, short convs, `o_norm` |
| M2 | `in_proj` rows: x `← W_V`, B `← W_K`, C `← W_Q`, z `← 0.5·(W_Oᵀ + expand(W_V))`; `out_proj ← W_O`; `B_norm ← k_norm`, `C_norm ← q_norm` | dt rows, conv, `A_log`, `dt_bias`, `D`, `norm` |
| SWA | `q_proj`, `k_proj`, `v_proj`, `o_proj`, `q_norm`, `k_norm` | — |
| BMF | `bmojo_attn.{q,k,v,o}_proj`, `bmojo_attn.{q,k}_norm` ← the attention's, and the untied fading copies `bmojo_attn.{q,k,v}_proj_`, `{q,k}_norm_` (`tie_attn_weights: false`); its SSM (`ssm_mixer`) under `gka.`, `gdn.` or `mamba.` by that SSM's row above | what that SSM initialises |

`expand(W_V)` repeats each key/value head for the query heads of its GQA group (`gate_init: headwise`, the
paper) or each row of W_V consecutively (`gate_init: rowwise`, what the reference code does). Embeddings, norms,
MLPs, the LM head and the kept attention layers are copied unchanged. A per-layer log says what was copied and
what was initialised.

The pattern comes from `hybrid_override_pattern` (plain tokens are turned into fused ones), or from
`hybrid_ratio` with `ssm_mixer`: the uniform pattern (attention layers evenly spaced from layer 0), or with
`importance_scores` the selective one (the least important layers are converted).

)" + config::render_schema_markdown(prime_init_schema());
}

}  // namespace primer::recipes
