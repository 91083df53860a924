// The Gated DeltaNet mixer on the CPU: its parameters carry the reference implementation's names and shapes; the
// whole layer in f64 against finite differences for the input, every parameter, the initial state (conv and
// recurrent) and gradients arriving at the final state, with and without GQA, gate, short convolutions; decoding
// token by token with the carried state reproduces the full forward; a hybrid "*-GDN" decoder trains.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/functions.h"
#include "layers/decoder_lm.h"
#include "layers/gdn_mixer.h"
#include "optim/adamw.h"
#include "tests/support/mixer_checks.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

struct Variant {
  const char* name;
  int64_t q_heads, kv_heads;
  bool use_gate, use_short_conv, conv_bias, allow_neg_eigval;
  int64_t kv_proj_rank = 0;  // Adaptive GQA when > 0
  bool kv_learnable_residual = false;
};
const Variant kVariants[] = {
    {"gqa_gate_convbias_negeig", 4, 2, true, true, true, true},
    {"plain_heads_defaults", 2, 2, true, true, false, false},
    {"no_gate_no_conv", 2, 2, false, false, false, false},
    {"adaptive_gqa_learnable_residual", 4, 2, true, true, false, false, 3, true},
};

ModelConfig tiny(const Variant& v) {
  ModelConfig c = test::tiny_mixer_config(v.q_heads, v.kv_heads);
  c.gdn.use_gate = v.use_gate;
  c.gdn.use_short_conv = v.use_short_conv;
  c.gdn.conv_bias = v.conv_bias;
  c.gdn.allow_neg_eigval = v.allow_neg_eigval;
  c.gdn.conv_size = 3;
  if (v.kv_proj_rank > 0) c.gdn.kv_proj_rank = v.kv_proj_rank;
  c.gdn.kv_learnable_residual = v.kv_learnable_residual;
  return c;
}

// A random initial state: per conv the last conv_size − 1 inputs, and the recurrent matrix.
layers::MixerState random_state(const ModelConfig& c, int64_t B, uint64_t seed) {
  layers::MixerState s;
  const int64_t H = std::max(c.num_attention_heads, c.num_key_value_heads), D = c.head_dim;
  if (c.gdn.use_short_conv)
    for (int64_t heads : {c.num_attention_heads, c.num_key_value_heads, c.num_key_value_heads})
      s.conv.push_back(
          ag::constant(test::randn({B, heads * D, c.gdn.conv_size - 1}, seed + uint64_t(heads) + s.conv.size())));
  s.recurrent.push_back(ag::constant(test::randn({B, H, D, D}, seed + 99, DType::F64, Device::cpu(), 0.5)));
  return s;
}

TEST(GdnMixer, RegistersTheReferenceNamesAndShapes) {
  ModelConfig c = tiny(kVariants[0]);
  c.layer_types = {MixerKind::Attention, MixerKind::GatedDeltaNet};
  ParameterRegistry params;
  layers::DecoderLM model(c, params);
  const std::string p = "model.layers.1.gdn.";
  test::expect_parameter_shapes(params, p,
                                {{"q_proj.weight", {16, 8}},
                                 {"k_proj.weight", {8, 8}},
                                 {"v_proj.weight", {8, 8}},
                                 {"b_proj.weight", {4, 8}},
                                 {"gk_proj.weight", {4, 8}},
                                 {"A_log", {4}},
                                 {"dt_bias", {4}},
                                 {"q_conv1d.weight", {16, 1, 3}},
                                 {"q_conv1d.bias", {16}},
                                 {"k_conv1d.weight", {8, 1, 3}},
                                 {"k_conv1d.bias", {8}},
                                 {"v_conv1d.weight", {8, 1, 3}},
                                 {"v_conv1d.bias", {8}},
                                 {"g_proj.weight", {16, 8}},
                                 {"o_norm.weight", {4}},
                                 {"o_proj.weight", {8, 16}}},
                                true);
  test::expect_ssm_decay_parameters(params, p);
}

// Adaptive GQA starts as plain GQA (zero low-rank output, replication residual): same output at Stage 0.
TEST(GdnMixer, AdaptiveGqaStartsAsPlainGqa) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig agqa = tiny(kVariants[3]);
  ModelConfig plain = agqa;
  plain.gdn.kv_proj_rank.reset();
  test::expect_adaptive_gqa_starts_as_plain<layers::GdnMixer>(agqa, plain, "gdn", {"proj_k.linearA.weight", "v_rep"},
                                                              seed, 1e-14);
}

class GdnMixerVariants : public ::testing::TestWithParam<Variant> {};

TEST_P(GdnMixerVariants, LayerGradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(GetParam());
  test::check_layer_gradients(
      c.hidden_size, [&](ParameterRegistry& p) { return layers::GdnMixer(c, "gdn", p); },
      [&](int64_t B, uint64_t s) { return random_state(c, B, s); }, seed);
}

// Decoding one token at a time, each call starting from the previous call's state, reproduces the full forward
// (outputs and final state), from zeros and from a given initial state.
TEST_P(GdnMixerVariants, DecodingTokenByTokenReproducesTheFullForward) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(GetParam());
  test::check_decoding(
      c.hidden_size, [&](ParameterRegistry& p) { return layers::GdnMixer(c, "gdn", p); },
      [&](int64_t B, uint64_t s) { return random_state(c, B, s); }, seed, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Flags, GdnMixerVariants, ::testing::ValuesIn(kVariants),
                         [](const auto& i) { return std::string(i.param.name); });

// A hybrid decoder (attention, then Gated DeltaNet) memorises a fixed batch on the CPU: the loss falls.
TEST(GdnMixer, HybridDecoderTrains) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Random targets over 13 tokens start near ln 13 ≈ 2.56; 30 steps of memorisation must cut that clearly.
  test::expect_hybrid_decoder_learns(test::small_hybrid(tiny(kVariants[0]), "*-GDN"), 0.7, seed);
}

}  // namespace
}  // namespace primer
