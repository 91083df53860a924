// The Kalman linear attention mixer (KLA) on the CPU: its parameters; the whole layer in f64 against finite
// differences (input, every parameter including the filter dynamics, initial conv and recurrent state λ, η,
// gradients arriving at the final state) with GQA, without gate and convolutions; decoding token by token
// reproduces the full forward; kla_config round-trips through config.json; a hybrid "*-KLA" decoder trains.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/functions.h"
#include "layers/decoder_lm.h"
#include "layers/kla_mixer.h"
#include "tests/support/mixer_checks.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

struct Variant {
  const char* name;
  int64_t q_heads, kv_heads;
  bool use_gate, use_short_conv;
};
const Variant kVariants[] = {
    {"gqa_gate_conv", 4, 2, true, true},
    {"no_gate_no_conv", 2, 2, false, false},
};

ModelConfig tiny(const Variant& v) {
  ModelConfig c = test::tiny_mixer_config(v.q_heads, v.kv_heads);
  c.kla.use_gate = v.use_gate;
  c.kla.use_short_conv = v.use_short_conv;
  c.kla.conv_size = 3;
  return c;
}

// Conv inputs, and a filter state with λ ∈ [0.5, 2] (a precision must be positive) and η ~ N(0, 1).
layers::MixerState random_state(const ModelConfig& c, int64_t B, uint64_t seed) {
  layers::MixerState s;
  const int64_t H = std::max(c.num_attention_heads, c.num_key_value_heads), D = c.head_dim;
  if (c.kla.use_short_conv)
    for (int64_t heads : {c.num_attention_heads, c.num_key_value_heads, c.num_key_value_heads})
      s.conv.push_back(
          ag::constant(test::randn({B, heads * D, c.kla.conv_size - 1}, seed + uint64_t(heads) + s.conv.size())));
  s.recurrent.push_back(ag::constant(test::rand_uniform({B, H, D, D}, seed + 98, 0.5, 2.0)));
  s.recurrent.push_back(ag::constant(test::randn({B, H, D, D}, seed + 99)));
  return s;
}

TEST(KlaMixer, RegistersItsParametersUnderKla) {
  ModelConfig c = tiny(kVariants[0]);
  c.layer_types = parse_hybrid_pattern("*-KLA", "test");
  c.validate("test");
  ParameterRegistry params;
  layers::DecoderLM model(c, params);
  const std::string p = "model.layers.1.kla.";
  test::expect_parameter_shapes(params, p,
                                {{"q_proj.weight", {16, 8}},
                                 {"k_proj.weight", {8, 8}},
                                 {"v_proj.weight", {8, 8}},
                                 {"lv_proj.weight", {16, 8}},
                                 {"lambda_log", {4, 4, 4}},
                                 {"delta", {4, 4, 4}},
                                 {"process_noise_log", {4, 4, 4}},
                                 {"q_conv1d.weight", {16, 1, 3}},
                                 {"k_conv1d.weight", {8, 1, 3}},
                                 {"v_conv1d.weight", {8, 1, 3}},
                                 {"g_proj.weight", {16, 8}},
                                 {"o_norm.weight", {4}},
                                 {"o_proj.weight", {8, 16}}},
                                false);
  for (const char* name : {"lambda_log", "delta", "process_noise_log"})
    EXPECT_TRUE(params.get(p + name).keep_f32) << name;
}

class KlaMixerVariants : public ::testing::TestWithParam<Variant> {};

TEST_P(KlaMixerVariants, LayerGradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(GetParam());
  test::check_layer_gradients(
      c.hidden_size, [&](ParameterRegistry& p) { return layers::KlaMixer(c, "kla", p); },
      [&](int64_t B, uint64_t s) { return random_state(c, B, s); }, seed);
}

TEST_P(KlaMixerVariants, DecodingTokenByTokenReproducesTheFullForward) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(GetParam());
  test::check_decoding(
      c.hidden_size, [&](ParameterRegistry& p) { return layers::KlaMixer(c, "kla", p); },
      [&](int64_t B, uint64_t s) { return random_state(c, B, s); }, seed, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Flags, KlaMixerVariants, ::testing::ValuesIn(kVariants),
                         [](const auto& i) { return std::string(i.param.name); });

TEST(KlaMixer, ConfigJsonRoundTrips) {
  ModelConfig c = tiny(kVariants[0]);
  c.layer_types = parse_hybrid_pattern("*-KLA", "test");
  c.kla.process_noise_init = 0.05;
  c.kla.min_precision = 1e-3;
  const json::Value j = to_hf_json(c);
  ASSERT_NE(j.as_object().find("kla_config"), nullptr);
  const ModelConfig back = from_hf_json(json::parse(json::dump(j, 2), "written"), "written");
  EXPECT_EQ(back.layer_types, c.layer_types);
  EXPECT_EQ(back.kla, c.kla);
}

TEST(KlaMixer, HybridDecoderTrains) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::expect_hybrid_decoder_learns(test::small_hybrid(tiny(kVariants[0]), "*-KLA"), 0.7, seed);
}

}  // namespace
}  // namespace primer
