#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/functions.h"
#include "core/parameters.h"
#include "layers/decoder_lm.h"
#include "core/io/json.h"
#include "layers/hybrid_config.h"
#include "layers/model_config.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

TEST(HybridPattern, ParsesAndFormatsTheReferenceGrammar) {
  const auto layers = parse_hybrid_pattern("*-GKA-SWA-GDN-M2", "test");
  const std::vector<MixerKind> expected = {MixerKind::Attention, MixerKind::GatedKalmaNet, MixerKind::SlidingWindow,
                                           MixerKind::GatedDeltaNet, MixerKind::Mamba2};
  EXPECT_EQ(layers, expected);
  EXPECT_EQ(format_hybrid_pattern(layers), "*-GKA-SWA-GDN-M2");
  EXPECT_STREQ(mixer_module(MixerKind::GatedKalmaNet), "gka");
  EXPECT_STREQ(mixer_module(MixerKind::Mamba2), "mamba");
  EXPECT_TRUE(is_ssm(MixerKind::GatedDeltaNet));
  EXPECT_FALSE(is_ssm(MixerKind::SlidingWindow));
}

TEST(HybridPattern, BadTokensAreNamed) {
  test::expect_error([] { parse_hybrid_pattern("*-GKB-*", "stage0.yaml"); },
                     {"stage0.yaml", "layer 1", "'GKB'", "expected one of"});
  test::expect_error([] { parse_hybrid_pattern("*--GKA", "stage0.yaml"); }, {"empty token", "character 2"});
  test::expect_error([] { parse_hybrid_pattern("", "stage0.yaml"); }, {"empty token"});
}

TEST(HybridPattern, ModelConfigChecksLayerCountAndSwaWindow) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 64, c.hidden_size = 32, c.intermediate_size = 64, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 8, c.max_position_embeddings = 128;
  c.layer_types = parse_hybrid_pattern("*-SWA-*", "t");
  test::expect_error([&] { c.validate("cfg"); }, {"cfg", "3 layers", "num_hidden_layers = 2"});
  c.layer_types = parse_hybrid_pattern("*-SWA", "t");
  test::expect_error([&] { c.validate("cfg"); }, {"window_size"});
  c.swa.window_size = 16;
  c.validate("cfg");
  EXPECT_EQ(c.mixer(1), MixerKind::SlidingWindow);
  // A SWA layer registers its attention under `swa` as the reference names it.
  ParameterRegistry params;
  layers::DecoderLM model(c, params);
  EXPECT_TRUE(params.contains("model.layers.1.swa.q_proj.weight"));
  EXPECT_TRUE(params.contains("model.layers.0.self_attn.q_proj.weight"));
}

TEST(Parameters, SsmLogSpaceInitRules) {
  ParameterRegistry params;
  params.add("A_log", {4096}, InitRule::log_uniform(1e-3, 16.0), false);
  params.add("dt_bias", {4096}, InitRule::softplus_inverse_log_uniform(1e-3, 0.1, 1e-4), false).keep_f32 = true;
  params.materialize(Device::cpu(), DType::BF16, 7);
  const auto a = params.get("A_log").master.to_vector<double>();
  const auto dt = params.get("dt_bias").master.to_vector<double>();
  double lo = 1e9, hi = -1e9, dt_lo = 1e9, dt_hi = -1e9, mean_log_dt = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    lo = std::min(lo, std::exp(a[i])), hi = std::max(hi, std::exp(a[i]));
    const double sp = std::log1p(std::exp(dt[i]));  // softplus(dt_bias) = dt
    dt_lo = std::min(dt_lo, sp), dt_hi = std::max(dt_hi, sp);
    mean_log_dt += std::log(sp) / double(a.size());
  }
  EXPECT_GE(lo, 1e-3 * 0.999);
  EXPECT_LE(hi, 16.0 * 1.001);
  EXPECT_GT(hi, 15.0);  // the draw covers the range
  EXPECT_GE(dt_lo, 1e-3 * 0.999);
  EXPECT_LE(dt_hi, 0.1 * 1.001);
  EXPECT_NEAR(mean_log_dt, 0.5 * (std::log(1e-3) + std::log(0.1)), 0.1);  // log-uniform: mean of the log bounds
  // keep_f32 parameters compute on their f32 master even under bf16 mixed precision.
  EXPECT_EQ(params.get("dt_bias").var->value.dtype(), DType::F32);
  EXPECT_EQ(params.get("A_log").var->value.dtype(), DType::BF16);
}

// The stateful short convolution: running [x1; x2] at once equals x1 then x2 from x1's final state, and gradients
// reach the initial state (checked by finite differences through the two-call chain).
TEST(CausalConv1dState, ChunkedCallsChainAndPassGradients) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T1 = 2, T2 = 5, C = 3, K = 4;
  test::GradCheck check;
  check.inputs = {test::randn({B, T1 + T2, C}, seed), test::randn({C, K}, seed + 1), test::randn({C}, seed + 2),
                  test::randn({B, C, K - 1}, seed + 3)};
  check.names = {"x", "w", "bias", "state_in"};
  auto run = [&](const std::vector<ag::Var>& in, bool split) {
    if (!split) {
      ag::Var so;
      ag::Var y = ag::causal_conv1d(in[0], in[1], in[2], true, in[3], &so);
      return std::vector<ag::Var>{y, so};
    }
    const Tensor x = in[0]->value;
    ag::Var x1 = ag::constant(x.slice(1, 0, T1).contiguous()), x2 = ag::constant(x.slice(1, T1, T1 + T2).contiguous());
    ag::Var s1, s2;
    ag::Var y1 = ag::causal_conv1d(x1, in[1], in[2], true, in[3], &s1);
    ag::Var y2 = ag::causal_conv1d(x2, in[1], in[2], true, s1, &s2);
    return std::vector<ag::Var>{y1, y2, s2};
  };
  // Forward equivalence.
  {
    ag::NoGrad no_grad;
    std::vector<ag::Var> in;
    for (const Tensor& t : check.inputs) in.push_back(ag::constant(t));
    const auto whole = run(in, false), parts = run(in, true);
    test::expect_close(parts[0]->value, whole[0]->value.slice(1, 0, T1), 1e-15, 1e-15, "first call");
    test::expect_close(parts[1]->value, whole[0]->value.slice(1, T1, T1 + T2), 1e-15, 1e-15, "second call");
    test::expect_close(parts[2]->value, whole[1]->value, 0, 0, "final state");
  }
  for (const bool split : {false, true}) {
    SCOPED_TRACE(split ? "two chained calls (x held constant)" : "one call");
    check.forward = [&](const std::vector<Tensor>& in) {
      ag::NoGrad no_grad;
      std::vector<ag::Var> v;
      for (const Tensor& t : in) v.push_back(ag::constant(t));
      std::vector<Tensor> out;
      for (const ag::Var& o : run(v, split)) out.push_back(o->value);
      return out;
    };
    check.backward = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& g) {
      std::vector<ag::Var> v;
      for (const Tensor& t : in) v.push_back(ag::leaf(t));
      v[1]->accumulates = v[2]->accumulates = true;
      const auto out = run(v, split);
      for (size_t i = 0; i < out.size(); ++i) out[i]->grad = g[i];
      ag::current_tape().backward();
      return std::vector<Tensor>{split ? Tensor() : v[0]->grad, v[1]->grad, v[2]->grad, v[3]->grad};
    };
    test::run_gradcheck(check, seed);
  }
}

}  // namespace
}  // namespace primer

namespace primer {
namespace {

// A config.json as the Priming reference writes it for a 4-layer hybrid Qwen3 (hmf.md §8.1), Stage 2 form.
const char* kHybridQwen3 = R"({
  "architectures": ["HybridQwen3ForCausalLM"], "model_type": "hybrid_qwen3",
  "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu",
  "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
  "rope_parameters": {"rope_type": "default", "rope_theta": 1000000},
  "attention_bias": false, "use_sliding_window": false, "sliding_window": null, "torch_dtype": "bfloat16",
  "hybrid_override_pattern": "*-GKA-GDN-M2", "layer_types": ["*", "GKA", "GDN", "M2"],
  "gka_config": {"hidden_size": 64, "head_dim": 16, "num_q_heads": 4, "num_k_heads": 2, "num_v_heads": 2,
                 "use_alpha_connection": true, "use_v_conv": false, "use_forgetting_gate": true, "gla_rescale": true,
                 "solver_type": "chebyshev", "bp_lambda": false, "num_iter": 10, "ridge_strength": 0.05,
                 "use_gate": true, "conv_size": 4, "norm_eps": 1e-6, "use_forgetting_gate_kk": true,
                 "use_beta_gate": true, "chunk_size": 64, "kv_proj_rank": null, "kv_learnable_residual": false},
  "gdn_config": {"hidden_size": 64, "head_dim": 16, "num_q_heads": 4, "num_k_heads": 2, "num_v_heads": 2,
                 "use_gate": true, "use_short_conv": true, "allow_neg_eigval": true, "conv_size": 4,
                 "conv_bias": false, "norm_eps": 1e-5, "kv_proj_rank": null, "kv_learnable_residual": false},
  "mamba2_config": {"d_model": 64, "d_inner": 64, "d_xb": 32, "intermediate_size": 96, "hidden_act": "silu",
                    "rms_norm_eps": 1e-6, "n_layer": 4, "ssm_cfg": {"expand": 1, "ngroups": 4, "d_state": 16},
                    "use_qk_norm": true, "use_pos_emb": false}
})";

ModelConfig parse_config(const std::string& text) {
  return from_hf_json(json::parse(text, "config.json"), "config.json");
}

std::string with(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(HybridConfigJson, ReadsTheReferenceFormat) {
  const ModelConfig c = parse_config(kHybridQwen3);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(format_hybrid_pattern(c.layer_types), "*-GKA-GDN-M2");
  EXPECT_FALSE(c.fused);
  EXPECT_FALSE(c.gka.use_v_conv);
  EXPECT_FALSE(c.gka.bp_lambda);
  EXPECT_EQ(c.gka.num_iter, 10);
  EXPECT_EQ(c.gka.ridge_strength, 0.05);
  EXPECT_TRUE(c.gdn.allow_neg_eigval);
  EXPECT_TRUE(c.mamba2.use_qk_norm);
  EXPECT_FALSE(c.gka.kv_proj_rank.has_value());
}

TEST(HybridConfigJson, RoundTripsPlainAndFused) {
  ModelConfig c = parse_config(kHybridQwen3);
  for (const bool fused : {false, true}) {
    c.fused = fused;
    const json::Value j = to_hf_json(c);
    EXPECT_EQ(json::Node(j, "w").at("model_type").as_string(), "hybrid_qwen3");
    EXPECT_EQ(json::Node(j, "w").at("architectures").at(size_t(0)).as_string(), "HybridQwen3ForCausalLM");
    EXPECT_EQ(json::Node(j, "w").at("hybrid_override_pattern").as_string(),
              fused ? "*DA-GKA*-GDN*-M2*" : "*-GKA-GDN-M2");
    EXPECT_EQ(json::Node(j, "w").at("layer_types").at(size_t(1)).as_string(), fused ? "GKA*" : "GKA");
    EXPECT_EQ(from_hf_json(json::parse(json::dump(j, 2), "written"), "written"), c) << json::dump(j, 2);
  }
}

// A recipe's inline model_config is checked against hf_config_keys(): every key primer writes, and every key of the
// reference's config, must be in it (or a model_config copied from an export would be refused).
TEST(HybridConfigJson, EveryKeyOfTheReferenceAndOfAnExportIsKnown) {
  const std::vector<std::string>& known = hf_config_keys();
  ModelConfig c = parse_config(kHybridQwen3);
  c.rope_scaling = {RopeScaling::Type::Llama3, 8.0, 1.0, 4.0, 64};
  const json::Value exported = to_hf_json(c), reference = json::parse(kHybridQwen3, "reference");
  for (const json::Value* doc : {&exported, &reference})
    for (const auto& [key, value] : doc->as_object())
      EXPECT_NE(std::find(known.begin(), known.end(), key), known.end()) << key;
}

TEST(HybridConfigJson, ErrorsNameTheKey) {
  test::expect_error([] { parse_config(with(kHybridQwen3, "\"num_q_heads\": 4", "\"num_q_heads\": 8")); },
                     {"config.json", "gka_config.num_q_heads", "is 8", "the model has 4"});
  test::expect_error([] { parse_config(with(kHybridQwen3, "\"chebyshev\"", "\"cg\"")); },
                     {"gka_config.solver_type", "expected chebyshev"});
  test::expect_error([] { parse_config(with(kHybridQwen3, "*-GKA-GDN-M2\"", "*-GKA-GDN\"")); },
                     {"hybrid_override_pattern", "3 layers", "num_hidden_layers = 4"});
  test::expect_error([] { parse_config(with(kHybridQwen3, "*-GKA-GDN-M2\"", "*-GKA-SWA-M2\"")); }, {"swa_config"});
  test::expect_error([] { parse_config(with(kHybridQwen3, "*-GKA-GDN-M2\"", "*DA-GKA*-GDN-M2\"")); },
                     {"layer 2", "mixes fused and plain"});
  test::expect_error([] { parse_config(with(kHybridQwen3, "\"d_state\": 16", "\"d_state\": 64")); },
                     {"mamba2_config.ssm_cfg.d_state"});
}

TEST(HybridPattern, FusedTokens) {
  const HybridPattern p = parse_any_hybrid_pattern("*DA-GKA*-*DA-M2*", "stage0.yaml");
  EXPECT_TRUE(p.fused);
  const std::vector<MixerKind> expected = {MixerKind::Attention, MixerKind::GatedKalmaNet, MixerKind::Attention,
                                           MixerKind::Mamba2};
  EXPECT_EQ(p.layers, expected);
  EXPECT_EQ(format_hybrid_pattern(p), "*DA-GKA*-*DA-M2*");
  EXPECT_FALSE(parse_any_hybrid_pattern("*-GDN", "x").fused);
  test::expect_error([] { parse_any_hybrid_pattern("*DA-**", "x"); }, {"'**' is not a fused token"});
}

}  // namespace
}  // namespace primer
