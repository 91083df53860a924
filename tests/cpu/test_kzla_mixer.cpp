// The Kaczmarz linear attention mixer (KZLA) on the CPU: Gated DeltaNet's parameters under `kzla`; the whole layer
// in f64 against finite differences (input, every parameter, initial conv and recurrent state, gradients arriving at
// the final state) with and without GQA, gate, short convolutions and Adaptive GQA; decoding token by token
// reproduces the full forward; the layer is the Kaczmarz recurrence on its raw keys (not GDN's normalised ones);
// kzla_config round-trips through config.json; a hybrid "*-KZLA" decoder trains.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/functions.h"
#include "layers/decoder_lm.h"
#include "layers/gdn_mixer.h"
#include "tests/support/mixer_checks.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

struct Variant {
  const char* name;
  int64_t q_heads, kv_heads;
  bool use_gate, use_short_conv, conv_bias;
  int64_t kv_proj_rank = 0;  // Adaptive GQA when > 0
};
const Variant kVariants[] = {
    {"gqa_gate_convbias", 4, 2, true, true, true},
    {"plain_heads_defaults", 2, 2, true, true, false},
    {"no_gate_no_conv", 2, 2, false, false, false},
    {"adaptive_gqa", 4, 2, true, true, false, 3},
};

ModelConfig tiny(const Variant& v) {
  ModelConfig c = test::tiny_mixer_config(v.q_heads, v.kv_heads);
  c.kzla.use_gate = v.use_gate;
  c.kzla.use_short_conv = v.use_short_conv;
  c.kzla.conv_bias = v.conv_bias;
  c.kzla.conv_size = 3;
  if (v.kv_proj_rank > 0) c.kzla.kv_proj_rank = v.kv_proj_rank;
  return c;
}

layers::MixerState random_state(const ModelConfig& c, int64_t B, uint64_t seed) {
  layers::MixerState s;
  const int64_t H = std::max(c.num_attention_heads, c.num_key_value_heads), D = c.head_dim;
  if (c.kzla.use_short_conv)
    for (int64_t heads : {c.num_attention_heads, c.num_key_value_heads, c.num_key_value_heads})
      s.conv.push_back(
          ag::constant(test::randn({B, heads * D, c.kzla.conv_size - 1}, seed + uint64_t(heads) + s.conv.size())));
  s.recurrent.push_back(ag::constant(test::randn({B, H, D, D}, seed + 99, DType::F64, Device::cpu(), 0.5)));
  return s;
}

layers::GdnMixer kzla(const ModelConfig& c, ParameterRegistry& params) {
  return layers::GdnMixer(c, "kzla", params, layers::DeltaStep::Kaczmarz);
}

TEST(KzlaMixer, RegistersGdnNamesUnderKzla) {
  ModelConfig c = tiny(kVariants[0]);
  c.layer_types = parse_hybrid_pattern("*-KZLA", "test");
  c.validate("test");
  ParameterRegistry params;
  layers::DecoderLM model(c, params);
  for (const char* name :
       {"q_proj.weight", "k_proj.weight", "v_proj.weight", "b_proj.weight", "gk_proj.weight", "A_log", "dt_bias",
        "q_conv1d.weight", "q_conv1d.bias", "g_proj.weight", "o_norm.weight", "o_proj.weight"})
    EXPECT_TRUE(params.contains(std::string("model.layers.1.kzla.") + name)) << name;
  EXPECT_TRUE(is_ssm(MixerKind::KaczmarzLinearAttention));
  EXPECT_STREQ(mixer_module(MixerKind::KaczmarzLinearAttention), "kzla");
}

// The same weights as a GDN layer give a different output: GDN normalises the keys, KZLA keeps their norms (which
// divide the written values).
TEST(KzlaMixer, UsesTheRawKeyNorms) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(kVariants[2]);
  ModelConfig as_gdn = c;
  as_gdn.gdn = c.kzla;
  ParameterRegistry pk, pg;
  layers::GdnMixer k_layer = kzla(c, pk), g_layer(as_gdn, "kzla", pg);
  pk.materialize(Device::cpu(), DType::F64, seed);
  pg.materialize(Device::cpu(), DType::F64, seed);
  const Tensor x = test::randn({2, 6, c.hidden_size}, seed + 1);
  ag::NoGrad no_grad;
  const test::Diff d =
      test::compare(k_layer.forward(ag::constant(x), {})->value, g_layer.forward(ag::constant(x), {})->value);
  EXPECT_GT(d.max_abs, 1e-3) << "KZLA equals GDN on the same weights: are the keys normalised?";
}

class KzlaMixerVariants : public ::testing::TestWithParam<Variant> {};

TEST_P(KzlaMixerVariants, LayerGradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(GetParam());
  test::check_layer_gradients(
      c.hidden_size, [&](ParameterRegistry& p) { return kzla(c, p); },
      [&](int64_t B, uint64_t s) { return random_state(c, B, s); }, seed);
}

TEST_P(KzlaMixerVariants, DecodingTokenByTokenReproducesTheFullForward) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(GetParam());
  test::check_decoding(
      c.hidden_size, [&](ParameterRegistry& p) { return kzla(c, p); },
      [&](int64_t B, uint64_t s) { return random_state(c, B, s); }, seed, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Flags, KzlaMixerVariants, ::testing::ValuesIn(kVariants),
                         [](const auto& i) { return std::string(i.param.name); });

// kzla_config is written with the model's heads and every option, and read back to the same config.
TEST(KzlaMixer, ConfigJsonRoundTrips) {
  ModelConfig c = tiny(kVariants[3]);
  c.layer_types = parse_hybrid_pattern("*-KZLA", "test");
  c.kzla.norm_eps = 3e-5;
  c.kzla.allow_neg_eigval = true;
  const json::Value j = to_hf_json(c);
  const json::Value* block = j.as_object().find("kzla_config");
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(block->as_object().find("kv_proj_rank")->as_int(), 3);
  EXPECT_EQ(j.as_object().find("hybrid_override_pattern")->as_string(), "*-KZLA");
  const ModelConfig back = from_hf_json(json::parse(json::dump(j, 2), "written"), "written");
  EXPECT_EQ(back.layer_types, c.layer_types);
  EXPECT_EQ(back.kzla, c.kzla);
  EXPECT_EQ(back.gdn, GdnConfig{});  // GDN's options are not KZLA's
}

TEST(KzlaMixer, HybridDecoderTrains) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::expect_hybrid_decoder_learns(test::small_hybrid(tiny(kVariants[0]), "*-KZLA"), 0.7, seed);
}

}  // namespace
}  // namespace primer
