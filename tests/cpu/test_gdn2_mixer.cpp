// The Gated DeltaNet-2 mixer (GDN2) on the CPU: its parameters; the whole layer in f64 against finite differences
// (input, every parameter, initial conv and recurrent state, gradients arriving at the final state) with GQA, gate,
// conv bias and the negative-eigenvalue erase gate, without gate and convolutions, and with KDA's gates (one per head,
// also checked against GDN-2 with both gate projections repeating KDA's rows); decoding token by token
// reproduces the full forward; gdn2_config round-trips through config.json; a "*-GDN2" model exported to a Hugging
// Face directory and imported again gives the same logits; hybrid_learnable_params: gdn2 selects the mixer's
// parameters; a hybrid "*-GDN2" decoder trains.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/autograd/functions.h"
#include "layers/decoder_lm.h"
#include "layers/gdn2_mixer.h"
#include "layers/hf_checkpoint.h"
#include "tests/support/mixer_checks.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

struct Variant {
  const char* name;
  int64_t q_heads, kv_heads;
  bool use_gate, use_short_conv, conv_bias, allow_neg_eigval, kda_gates = false;
};
const Variant kVariants[] = {
    {"gqa_gate_conv_bias_negeig", 4, 2, true, true, true, true},
    {"queries_expanded", 2, 4, true, true, false, false},  // fewer query heads than kv heads
    {"no_gate_no_conv", 2, 2, false, false, false, false},
    {"kda_gates_gqa_negeig", 4, 2, true, true, false, true, true},  // Kimi Delta Attention's one gate per head
};

ModelConfig tiny(const Variant& v) {
  ModelConfig c = test::tiny_mixer_config(v.q_heads, v.kv_heads);
  c.gdn2.use_gate = v.use_gate;
  c.gdn2.use_short_conv = v.use_short_conv;
  c.gdn2.conv_bias = v.conv_bias;
  c.gdn2.allow_neg_eigval = v.allow_neg_eigval;
  c.gdn2.kda_gates = v.kda_gates;
  c.gdn2.conv_size = 3;
  return c;
}

layers::MixerState random_state(const ModelConfig& c, int64_t B, uint64_t seed) {
  layers::MixerState s;
  const int64_t H = std::max(c.num_attention_heads, c.num_key_value_heads), D = c.head_dim;
  if (c.gdn2.use_short_conv)
    for (int64_t heads : {c.num_attention_heads, c.num_key_value_heads, c.num_key_value_heads})
      s.conv.push_back(
          ag::constant(test::randn({B, heads * D, c.gdn2.conv_size - 1}, seed + uint64_t(heads) + s.conv.size())));
  s.recurrent.push_back(ag::constant(test::randn({B, H, D, D}, seed + 99)));
  return s;
}

TEST(Gdn2Mixer, RegistersItsParametersUnderGdn2) {
  ModelConfig c = tiny(kVariants[0]);
  c.layer_types = parse_hybrid_pattern("*-GDN2", "test");
  c.validate("test");
  ParameterRegistry params;
  layers::DecoderLM model(c, params);
  const std::string p = "model.layers.1.gdn2.";
  test::expect_parameter_shapes(params, p,
                                {{"q_proj.weight", {16, 8}},
                                 {"k_proj.weight", {8, 8}},
                                 {"v_proj.weight", {8, 8}},
                                 {"b_proj.weight", {16, 8}},
                                 {"w_proj.weight", {16, 8}},
                                 {"f_proj.0.weight", {4, 8}},
                                 {"f_proj.1.weight", {16, 4}},
                                 {"A_log", {4}},
                                 {"dt_bias", {16}},
                                 {"q_conv1d.weight", {16, 1, 3}},
                                 {"k_conv1d.weight", {8, 1, 3}},
                                 {"v_conv1d.weight", {8, 1, 3}},
                                 {"q_conv1d.bias", {16}},
                                 {"k_conv1d.bias", {8}},
                                 {"v_conv1d.bias", {8}},
                                 {"g_proj.weight", {16, 8}},
                                 {"o_norm.weight", {4}},
                                 {"o_proj.weight", {8, 16}}},
                                true);
  for (const char* name : {"A_log", "dt_bias"}) EXPECT_TRUE(params.get(p + name).keep_f32) << name;
}

class Gdn2MixerVariants : public ::testing::TestWithParam<Variant> {};

TEST_P(Gdn2MixerVariants, LayerGradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(GetParam());
  test::check_layer_gradients(
      c.hidden_size, [&](ParameterRegistry& p) { return layers::Gdn2Mixer(c, "gdn2", p); },
      [&](int64_t B, uint64_t s) { return random_state(c, B, s); }, seed);
}

TEST_P(Gdn2MixerVariants, DecodingTokenByTokenReproducesTheFullForward) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(GetParam());
  test::check_decoding(
      c.hidden_size, [&](ParameterRegistry& p) { return layers::Gdn2Mixer(c, "gdn2", p); },
      [&](int64_t B, uint64_t s) { return random_state(c, B, s); }, seed, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Flags, Gdn2MixerVariants, ::testing::ValuesIn(kVariants),
                         [](const auto& i) { return std::string(i.param.name); });

// kda_gates is GDN-2's rule with both gates tied to one β per head: a KDA layer computes what a GDN-2 layer computes
// whose erase and write projections both repeat each of KDA's β rows over the head's channels (same other weights).
TEST(Gdn2Mixer, KdaGatesAreTheRuleWithBothGatesOneBetaPerHead) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Variant v = kVariants[3];
  v.allow_neg_eigval = false;  // GDN-2 doubles only its erase gate, KDA both: compare where neither doubles
  const ModelConfig kda_config = tiny(v);
  v.kda_gates = false;
  const ModelConfig gdn2_config = tiny(v);
  ParameterRegistry kda_params, gdn2_params;
  layers::Gdn2Mixer kda(kda_config, "gdn2", kda_params), gdn2(gdn2_config, "gdn2", gdn2_params);
  kda_params.materialize(Device::cpu(), DType::F64, seed);
  gdn2_params.materialize(Device::cpu(), DType::F64, seed);
  const Tensor beta_rows = kda_params.get("gdn2.b_proj.weight").master;  // [H, d]
  const int64_t D = kda_config.head_dim;
  for (Parameter* p : gdn2_params.all()) {
    if (p->name == "gdn2.b_proj.weight" || p->name == "gdn2.w_proj.weight") {
      const std::vector<double> rows = beta_rows.to_vector<double>();
      const int64_t d = beta_rows.size(1);
      std::vector<double> repeated;
      for (int64_t h = 0; h < beta_rows.size(0); ++h)
        for (int64_t c = 0; c < D; ++c)
          repeated.insert(repeated.end(), rows.begin() + h * d, rows.begin() + (h + 1) * d);
      p->master.copy_from(Tensor::from_vector(repeated, p->shape, DType::F32));
    } else {
      p->master.copy_from(kda_params.get(p->name).master);
    }
  }
  gdn2_params.sync_compute_copies();
  kda_params.sync_compute_copies();
  EXPECT_EQ(kda_params.all().size() + 1, gdn2_params.all().size());  // no w_proj
  const Tensor x = test::randn({2, 7, kda_config.hidden_size}, seed + 1);
  ag::NoGrad no_grad;
  const layers::MixerContext ctx;
  const Tensor y_kda = kda.forward(ag::constant(x), ctx)->value, y_gdn2 = gdn2.forward(ag::constant(x), ctx)->value;
  test::expect_close(y_kda, y_gdn2, 1e-12, 1e-12, "KDA gates against GDN-2 with repeated gate rows");
}

TEST(Gdn2Mixer, ConfigJsonRoundTrips) {
  ModelConfig c = tiny(kVariants[0]);
  c.layer_types = parse_hybrid_pattern("*-GDN2", "test");
  c.gdn2.norm_eps = 1e-6;
  c.gdn2.kda_gates = true;
  const json::Value j = to_hf_json(c);
  ASSERT_NE(j.as_object().find("gdn2_config"), nullptr);
  const ModelConfig back = from_hf_json(json::parse(json::dump(j, 2), "written"), "written");
  EXPECT_EQ(back.layer_types, c.layer_types);
  EXPECT_EQ(back.gdn2, c.gdn2);
}

// The Hugging Face export carries the pattern, gdn2_config and every GDN2 tensor: imported into a fresh model (another
// init), the logits are bit-identical.
TEST(Gdn2Mixer, ExportThenImportReproducesLogits) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string dir = testing::TempDir() + "/primer-gdn2-export-" + std::to_string(seed);
  ModelConfig c = tiny(kVariants[0]);
  c.layer_types = parse_hybrid_pattern("GDN2-*", "test");
  c.qk_norm = true;  // Qwen3's attention, as its config.json implies
  c.validate("test");
  ParameterRegistry a;
  layers::DecoderLM model_a(c, a);
  a.materialize(Device::cpu(), DType::F32, seed);
  layers::export_hf(dir, c, a, DType::F32);
  const ModelConfig loaded = load_hf_config(dir + "/config.json");
  EXPECT_EQ(loaded.layer_types, c.layer_types);
  EXPECT_EQ(loaded.gdn2, c.gdn2);
  ParameterRegistry b;
  layers::DecoderLM model_b(loaded, b);
  b.materialize(Device::cpu(), DType::F32, seed + 1);
  layers::load_hf_weights(dir, b);
  const Tensor ids = test::rand_ints({2, 7}, seed + 2, 0, c.vocab_size);
  EXPECT_EQ(model_a.logits(ids).to_vector<float>(), model_b.logits(ids).to_vector<float>());
  std::filesystem::remove_all(dir);
}

// hybrid_learnable_params matches parameter names by substring: "gdn2" selects exactly the GDN2 layer's parameters.
// ("gdn" selects GDN and GDN2 layers alike, since gdn2 contains it; docs/mixers.md says so.)
TEST(Gdn2Mixer, LearnableParamsSelectTheMixer) {
  ModelConfig c = tiny(kVariants[0]);
  c.layer_types = parse_hybrid_pattern("GDN-GDN2", "test");
  c.validate("test");
  ParameterRegistry params;
  layers::DecoderLM model(c, params);
  params.set_trainable({"gdn2"});
  size_t trainable = 0;
  for (Parameter* p : params.all()) {
    EXPECT_EQ(p->trainable, p->name.starts_with("model.layers.1.gdn2.")) << p->name;
    trainable += p->trainable;
  }
  EXPECT_EQ(trainable, 18u);
}

TEST(Gdn2Mixer, HybridDecoderTrains) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::expect_hybrid_decoder_learns(test::small_hybrid(tiny(kVariants[0]), "*-GDN2"), 0.7, seed);
}

}  // namespace
}  // namespace primer
