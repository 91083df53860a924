#include "recipes/prime_init.h"

#include <filesystem>
#include <set>

#include "core/check.h"
#include "core/io/atomic_file.h"
#include "layers/bmf_mixer.h"
#include "layers/decoder_lm.h"
#include "layers/hf_checkpoint.h"
#include "core/config/config.h"
#include "recipes/hybrid_patterns.h"
#include "recipes/model_files.h"
#include "recipes/prime_init_schema.h"

namespace primer::recipes {
namespace {

std::string layer_prefix(int64_t layer) { return "model.layers." + std::to_string(layer) + "."; }

// The master of `name` (CPU f32), checked against the shape the transfer expects.
Tensor master(ParameterRegistry& params, const std::string& name, const Shape& shape) {
  Tensor t = params.get(name).master;
  PRIMER_CHECK(t.shape() == shape && t.is_cpu() && t.dtype() == DType::F32,
               "Stage 0: '{}' is {}, expected f32 {} on the CPU", name, t.describe(), shape_str(shape));
  return t;
}

}  // namespace

// Head-wise gives each query head its own GQA group's value head; row-wise repeats each W_V row `groups` times
// consecutively, as the reference's repeat_interleave along rows does (which mixes dims across heads).
void init_gate(const Tensor& gate, const Tensor& w_o, const Tensor& w_v, int64_t head_dim, int64_t groups,
               bool rowwise) {
  const int64_t rows = gate.size(0), hidden = gate.size(1);
  PRIMER_CHECK(
      gate.is_contiguous() && w_o.shape() == Shape({hidden, rows}) && w_v.shape() == Shape({rows / groups, hidden}),
      "init_gate: gate {}, W_O {}, W_V {} do not fit (expected [R, C], [C, R], [R / {}, C])", gate.describe(),
      w_o.describe(), w_v.describe(), groups);
  const float* o = w_o.data<float>();
  const float* v = w_v.data<float>();
  float* g = gate.data<float>();
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t v_row = rowwise ? i / groups : (i / head_dim / groups) * head_dim + i % head_dim;
    for (int64_t c = 0; c < hidden; ++c) g[i * hidden + c] = 0.5f * (o[c * rows + i] + v[v_row * hidden + c]);
  }
}

namespace {

struct LayerTransfer {
  ParameterRegistry& params;
  const ModelConfig& c;
  std::string teacher, student;  // name prefixes
  std::vector<std::string> copied;

  Shape q_shape() const { return {c.num_attention_heads * c.head_dim, c.hidden_size}; }
  Shape kv_shape() const { return {c.num_key_value_heads * c.head_dim, c.hidden_size}; }
  Shape o_shape() const { return {c.hidden_size, c.num_attention_heads * c.head_dim}; }
  Tensor from(const std::string& leaf, const Shape& shape) { return master(params, teacher + leaf, shape); }
  void copy(const std::string& to, const std::string& leaf, const Shape& shape) {
    master(params, student + to, shape).copy_from(from(leaf, shape));
    copied.push_back(to + " ← " + leaf);
  }
  void gate(const Tensor& dst, const std::string& what, bool rowwise) {
    init_gate(dst, from("o_proj.weight", o_shape()), from("v_proj.weight", kv_shape()), c.head_dim,
              c.num_attention_heads / c.num_key_value_heads, rowwise);
    copied.push_back(what + " ← 0.5·(W_Oᵀ + " + (rowwise ? "row-wise" : "head-wise") + " W_V)");
  }
};

void transfer_gated_linear(LayerTransfer& t, bool use_gate, bool rowwise) {
  t.copy("q_proj.weight", "q_proj.weight", t.q_shape());
  t.copy("k_proj.weight", "k_proj.weight", t.kv_shape());
  t.copy("v_proj.weight", "v_proj.weight", t.kv_shape());
  t.copy("o_proj.weight", "o_proj.weight", t.o_shape());
  if (use_gate) t.gate(master(t.params, t.student + "g_proj.weight", t.q_shape()), "g_proj.weight", rowwise);
}

// Mamba-2's in_proj rows are [z | x | B | C | dt]: z is the gate, x ← W_V, B ← W_K, C ← W_Q (Mamba-in-Llama).
void transfer_mamba2(LayerTransfer& t, bool rowwise) {
  const ModelConfig& c = t.c;
  const int64_t d_inner = c.num_attention_heads * c.head_dim, d_xb = c.num_key_value_heads * c.head_dim;
  const Tensor in_proj =
      master(t.params, t.student + "in_proj.weight", {2 * d_inner + 2 * d_xb + c.num_attention_heads, c.hidden_size});
  t.gate(in_proj.slice(0, 0, d_inner), "in_proj.weight[z]", rowwise);
  in_proj.slice(0, d_inner, d_inner + d_xb).copy_from(t.from("v_proj.weight", t.kv_shape()));
  in_proj.slice(0, d_inner + d_xb, d_inner + 2 * d_xb).copy_from(t.from("k_proj.weight", t.kv_shape()));
  in_proj.slice(0, d_inner + 2 * d_xb, 2 * d_inner + 2 * d_xb).copy_from(t.from("q_proj.weight", t.q_shape()));
  t.copied.push_back("in_proj.weight[x, B, C] ← v_proj, k_proj, q_proj (dt rows initialised)");
  t.copy("out_proj.weight", "o_proj.weight", t.o_shape());
  if (c.mamba2.use_qk_norm && c.qk_norm) {
    t.copy("B_norm.weight", "k_norm.weight", {c.head_dim});
    t.copy("C_norm.weight", "q_norm.weight", {c.head_dim});
  }
}

void transfer_swa(LayerTransfer& t) {
  t.copy("q_proj.weight", "q_proj.weight", t.q_shape());
  t.copy("k_proj.weight", "k_proj.weight", t.kv_shape());
  t.copy("v_proj.weight", "v_proj.weight", t.kv_shape());
  t.copy("o_proj.weight", "o_proj.weight", t.o_shape());
  if (t.c.qk_norm) {
    t.copy("q_norm.weight", "q_norm.weight", {t.c.head_dim});
    t.copy("k_norm.weight", "k_norm.weight", {t.c.head_dim});
  }
}

// How Stage 0 fills each mixer's parameters from the attention it replaces, by pattern token.
struct TransferRule {
  const char* token;
  void (*transfer)(LayerTransfer& t, bool rowwise_gate);
};
const TransferRule& transfer_rule(MixerKind kind);

// B'MOJO-F (the reference's bmojo_attention_init): the attention's projections and QK-norms into bmojo_attn, again
// into the untied fading copies (q/k/v_proj_, q/k_norm_; there is no o_proj_); the SSM by its own rule.
void transfer_bmojo(LayerTransfer& t, bool rowwise) {
  const ModelConfig& c = t.c;
  for (const std::string s : {"", "_"}) {
    if (!s.empty() && c.bmojo.tie_attn_weights) break;
    t.copy("bmojo_attn.q_proj" + s + ".weight", "q_proj.weight", t.q_shape());
    t.copy("bmojo_attn.k_proj" + s + ".weight", "k_proj.weight", t.kv_shape());
    t.copy("bmojo_attn.v_proj" + s + ".weight", "v_proj.weight", t.kv_shape());
    if (s.empty()) t.copy("bmojo_attn.o_proj.weight", "o_proj.weight", t.o_shape());
    if (c.qk_norm) {
      t.copy("bmojo_attn.q_norm" + s + ".weight", "q_norm.weight", {c.head_dim});
      t.copy("bmojo_attn.k_norm" + s + ".weight", "k_norm.weight", {c.head_dim});
    }
  }
  const MixerKind ssm = layers::bmojo_ssm_kind(c.bmojo.ssm_mixer);
  const std::string module = std::string(mixer_module(ssm)) + ".";
  LayerTransfer inner{t.params, c, t.teacher, t.student + module, {}};
  transfer_rule(ssm).transfer(inner, rowwise);
  for (const std::string& what : inner.copied) t.copied.push_back(module + what);
}
constexpr TransferRule kTransferRules[] = {
    {"GKA", [](LayerTransfer& t, bool rowwise) { transfer_gated_linear(t, t.c.gka.use_gate, rowwise); }},
    {"GDN", [](LayerTransfer& t, bool rowwise) { transfer_gated_linear(t, t.c.gdn.use_gate, rowwise); }},
    // By analogy with GDN (the paper has no Priming rule): the attention's projections, the raw keys' norms kept.
    {"KZLA", [](LayerTransfer& t, bool rowwise) { transfer_gated_linear(t, t.c.kzla.use_gate, rowwise); }},
    // By analogy with GDN (KLA's paper has no Priming rule): q, k, v, o projections and the gate; the value
    // precision and the filter dynamics keep their own initialisation.
    {"KLA", [](LayerTransfer& t, bool rowwise) { transfer_gated_linear(t, t.c.kla.use_gate, rowwise); }},
    // By analogy with GDN (the GDN-2 paper has no Priming rule): q, k, v, o projections and the full-rank gate; the
    // erase and write gates and the channel-wise decay keep their own initialisation.
    {"GDN2", [](LayerTransfer& t, bool rowwise) { transfer_gated_linear(t, t.c.gdn2.use_gate, rowwise); }},
    {"M2", [](LayerTransfer& t, bool rowwise) { transfer_mamba2(t, rowwise); }},
    {"SWA", [](LayerTransfer& t, bool) { transfer_swa(t); }},
    {"BMF", [](LayerTransfer& t, bool rowwise) { transfer_bmojo(t, rowwise); }},
};

const TransferRule& transfer_rule(MixerKind kind) {
  const std::string token = mixer_token(kind);
  std::string supported;
  for (const TransferRule& rule : kTransferRules) {
    if (token == rule.token) return rule;
    supported += (supported.empty() ? "" : ", ") + std::string(rule.token);
  }
  PRIMER_FAIL("Stage 0 has no weight transfer into {} layers (supported: {})", token, supported);
}

DType parse_dtype(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "fp16" || name == "float16") return DType::F16;
  return DType::F32;
}

std::vector<MixerKind> pattern_from(const config::Config& cfg, int64_t layers, bool* fused_given) {
  *fused_given = false;
  if (cfg.has("hybrid_override_pattern")) {
    const HybridPattern p =
        parse_any_hybrid_pattern(cfg.get_string("hybrid_override_pattern"), cfg.where("hybrid_override_pattern"));
    *fused_given = p.fused;
    return p.layers;
  }
  const MixerKind kind = parse_mixer_token(cfg.get_string("ssm_mixer"), cfg.where("ssm_mixer"));
  const double ratio = cfg.get_float("hybrid_ratio");
  if (!cfg.has("importance_scores")) return uniform_pattern(layers, ratio, kind);
  const std::vector<double> importance = read_importance_csv(cfg.get_string("importance_scores"));
  PRIMER_CHECK(int64_t(importance.size()) == layers, "{}: {} layers scored, the base model has {}",
               cfg.get_string("importance_scores"), importance.size(), layers);
  return selective_pattern(importance, ratio, kind);
}

}  // namespace

std::vector<std::string> transfer_attention_weights(const ModelConfig& c, ParameterRegistry& params,
                                                    bool rowwise_gate) {
  PRIMER_CHECK(c.fused, "Stage 0 transfers into a fused teacher-student model");
  std::vector<std::string> log;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const MixerKind kind = c.mixer(i);
    if (kind == MixerKind::Attention) continue;
    LayerTransfer t{params, c, layer_prefix(i) + "self_attn.", layer_prefix(i) + mixer_module(kind) + ".", {}};
    transfer_rule(kind).transfer(t, rowwise_gate);
    std::vector<std::string> initialised;
    for (Parameter* p : params.all()) {
      if (!p->name.starts_with(t.student)) continue;
      const std::string leaf = p->name.substr(t.student.size());
      bool was_copied = false;
      for (const std::string& what : t.copied)
        was_copied |= what.starts_with(leaf + " ") || what.starts_with(leaf + "[");
      if (!was_copied) initialised.push_back(leaf);
    }
    log.push_back(
        fmt::format("layer {} {}: copied {}; initialised {}", i, mixer_token(kind), fmt::join(t.copied, ", "),
                    initialised.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(initialised, ", "))));
  }
  return log;
}

int run_prime_init(const std::string& recipe, const std::vector<std::string>& overrides) {
  const config::Config cfg = config::load_config(recipe, prime_init_schema(), overrides);
  const std::string base = cfg.get_string("base_model_name_or_path");
  check_model_dir(base, cfg.where("base_model_name_or_path") + " (base_model_name_or_path)");
  ModelConfig c = load_hf_config(base + "/config.json");
  PRIMER_CHECK(c.layer_types.empty(), "{}/config.json is already a hybrid ('{}'); Stage 0 starts from a Transformer",
               base, format_hybrid_pattern(c.layer_types));
  bool fused_given = false;
  c.layer_types = pattern_from(cfg, c.num_hidden_layers, &fused_given);
  c.fused = true;
  apply_mixer_options(cfg, c);
  c.torch_dtype = parse_dtype(cfg.get_string("dtype"));
  c.validate(recipe);
  fmt::print("prime-init: {} → {} (pattern {}{})\n", base, cfg.get_string("output_dir"),
             format_hybrid_pattern(HybridPattern{c.layer_types, true}), fused_given ? "" : ", made fused");

  ParameterRegistry params;
  layers::DecoderLM model(c, params);
  params.materialize(Device::cpu(), DType::F32, uint64_t(cfg.get_int("seed")));
  const std::vector<std::string> missing = layers::load_hf_weights_present(base, params);
  // What the Transformer lacks must be exactly the new mixers' parameters.
  for (const std::string& name : missing) {
    bool student = false;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      student |=
          c.mixer(i) != MixerKind::Attention && name.starts_with(layer_prefix(i) + mixer_module(c.mixer(i)) + ".");
    PRIMER_CHECK(student, "{}: the checkpoint lacks '{}', which the model needs", base, name);
  }
  const std::vector<std::string> log = transfer_attention_weights(c, params, cfg.get_string("gate_init") == "rowwise");
  for (const std::string& line : log) fmt::print("prime-init: {}\n", line);

  const std::string out = cfg.get_string("output_dir");
  layers::export_hf(out, c, params, c.torch_dtype);
  const int files = copy_model_files(base, out, cfg.get_bool("copy_auxiliary_files"));
  io::write_file_atomic(out + "/prime_init_log.txt", fmt::format("{}\n", fmt::join(log, "\n")));
  io::write_file_atomic(out + "/prime_init_config.yaml", cfg.resolved_yaml());
  fmt::print("prime-init: wrote {} parameters ({} new) and {} tokenizer/auxiliary files to {}\n", params.count(),
             missing.size(), files, out);
  return 0;
}

}  // namespace primer::recipes
