#include "recipes/prime_init_schema.h"

#include <variant>

#include "core/check.h"
#include "layers/hybrid_config_fields.h"

namespace primer::recipes {
namespace {

// One schema field per option of a mixer's table, defaulting to the struct's default.
template <class C>
void add_block(config::Schema& s, const std::string& section, const std::vector<ConfigField<C>>& fields) {
  const C defaults;
  for (const ConfigField<C>& f : fields) {
    const std::string key = section + "." + f.key;
    std::visit(
        [&](auto member) {
          using T = std::remove_cvref_t<decltype(defaults.*member)>;
          if constexpr (std::is_same_v<T, bool>) s.add_bool(key, f.doc).defaults(defaults.*member);
          if constexpr (std::is_same_v<T, int64_t>) s.add_int(key, f.doc).at_least(0).defaults(defaults.*member);
          if constexpr (std::is_same_v<T, double>) s.add_float(key, f.doc).above(0).defaults(defaults.*member);
        },
        f.member);
  }
}

template <class C>
void read_block(const config::Config& cfg, const std::string& section, const std::vector<ConfigField<C>>& fields, C& out) {
  for (const ConfigField<C>& f : fields) {
    const std::string key = section + "." + f.key;
    std::visit(
        [&](auto member) {
          using T = std::remove_cvref_t<decltype(out.*member)>;
          if constexpr (std::is_same_v<T, bool>) out.*member = cfg.get_bool(key);
          if constexpr (std::is_same_v<T, int64_t>) out.*member = cfg.get_int(key);
          if constexpr (std::is_same_v<T, double>) out.*member = cfg.get_float(key);
        },
        f.member);
  }
}

std::optional<int64_t> optional_int(const config::Config& cfg, const std::string& key) {
  return cfg.has(key) ? std::optional<int64_t>(cfg.get_int(key)) : std::nullopt;
}

config::Schema build_prime_init_schema() {
  config::Schema s;
  s.add_string("base_model_name_or_path", "Hugging Face checkpoint directory of the source Transformer").required();
  s.add_string("hybrid_override_pattern",
               "Per-layer tokens, '-'-separated: fused (*DA, GKA*, GDN*, M2*, SWA*) or plain (*, GKA, ...; "
               "converted to fused)")
      .optional();
  s.add_float("hybrid_ratio", "Instead of a pattern: the fraction of layers that become ssm_mixer layers")
      .at_least(0)
      .at_most(1)
      .optional();
  s.add_enum("ssm_mixer", {"GKA", "GDN", "M2", "SWA"}, "The mixer of the converted layers (with hybrid_ratio)")
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
  add_block(s, "gka", gka_fields());
  s.add_int("gka.kv_proj_rank", "Adaptive GQA rank of the K/V expansion; unset: plain GQA repetition")
      .at_least(1)
      .optional();
  add_block(s, "gdn", gdn_fields());
  s.add_int("gdn.kv_proj_rank", "Adaptive GQA rank of the K/V expansion; unset: plain GQA repetition")
      .at_least(1)
      .optional();
  add_block(s, "mamba2", mamba2_fields());
  s.add_int("swa.window_size", "Sliding window of SWA layers (required when the pattern has SWA)")
      .at_least(1)
      .optional();
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
  read_block(cfg, "gka", gka_fields(), c.gka);
  c.gka.kv_proj_rank = optional_int(cfg, "gka.kv_proj_rank");
  read_block(cfg, "gdn", gdn_fields(), c.gdn);
  c.gdn.kv_proj_rank = optional_int(cfg, "gdn.kv_proj_rank");
  read_block(cfg, "mamba2", mamba2_fields(), c.mamba2);
  if (cfg.has("swa.window_size")) c.swa.window_size = cfg.get_int("swa.window_size");
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
| GKA, GDN | `q_proj ← W_Q`, `k_proj ← W_K`, `v_proj ← W_V`, `o_proj ← W_O`, `g_proj ← 0.5·(W_Oᵀ + expand(W_V))` | gate, β, α projections, `A_log`, `dt_bias`, short convs, `o_norm` |
| M2 | `in_proj` rows: x `← W_V`, B `← W_K`, C `← W_Q`, z `← 0.5·(W_Oᵀ + expand(W_V))`; `out_proj ← W_O`; `B_norm ← k_norm`, `C_norm ← q_norm` | dt rows, conv, `A_log`, `dt_bias`, `D`, `norm` |
| SWA | `q_proj`, `k_proj`, `v_proj`, `o_proj`, `q_norm`, `k_norm` | — |

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
