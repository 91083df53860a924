// The Mamba-2 mixer on the CPU: the reference's parameter names and shapes, the init of its dynamics, the whole
// layer in f64 against finite differences (input, every parameter, the initial conv and SSM states, with gradients
// flowing out of the final states; GQA and not, with and without QK-norm and RoPE), decoding token by token with the
// carried state against the full forward, and a hybrid "*-M2" language model whose loss falls under AdamW.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/functions.h"
#include "core/autograd/slicing.h"
#include "core/ops/rope.h"
#include "layers/decoder_lm.h"
#include "layers/mamba2_mixer.h"
#include "optim/adamw.h"
#include "tests/support/mixer_checks.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

const std::string kPrefix = "model.layers.0.mamba";

ModelConfig tiny(int64_t kv_heads, bool qk_norm, bool pos_emb) {
  ModelConfig c = test::tiny_mixer_config(2, kv_heads, 1);
  c.rms_norm_eps = 1e-6;
  c.mamba2.use_qk_norm = qk_norm;
  c.mamba2.use_pos_emb = pos_emb;
  return c;
}

layers::MixerContext context(const ModelConfig& c, int64_t B, int64_t T, int64_t t0 = 0) {
  std::vector<int32_t> pos;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) pos.push_back(int32_t(t0 + t));
  return {Tensor::from_vector(pos, {B, T}, DType::I32), rope_inv_freq_for(c)};
}

TEST(Mamba2Mixer, ParameterNamesAndShapesFollowTheReference) {
  // Qwen3-8B's attention shape (hmf.md §8.2): in_proj [10272, 4096] = z 4096 | x 1024 | B 1024 | C 4096 | dt 32.
  ModelConfig c = tiny(8, true, false);
  c.hidden_size = 4096, c.num_attention_heads = 32, c.head_dim = 128;
  ParameterRegistry params;
  layers::Mamba2Mixer mixer(c, kPrefix, params);
  const std::vector<std::pair<std::string, Shape>> expected = {{".in_proj.weight", {10272, 4096}},
                                                               {".conv1d.weight", {6144, 1, 4}},
                                                               {".conv1d.bias", {6144}},
                                                               {".dt_bias", {32}},
                                                               {".A_log", {32}},
                                                               {".D", {32}},
                                                               {".norm.weight", {4096}},
                                                               {".out_proj.weight", {4096, 4096}},
                                                               {".B_norm.weight", {128}},
                                                               {".C_norm.weight", {128}}};
  ASSERT_EQ(params.all().size(), expected.size());
  for (const auto& [name, shape] : expected) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(params.contains(kPrefix + name));
    EXPECT_EQ(params.get(kPrefix + name).shape, shape);
  }
  for (const char* name : {".dt_bias", ".A_log", ".D"}) {
    EXPECT_TRUE(params.get(kPrefix + name).keep_f32) << name;
    EXPECT_FALSE(params.get(kPrefix + name).weight_decay) << name;
  }
  EXPECT_TRUE(params.get(kPrefix + ".in_proj.weight").weight_decay);
}

TEST(Mamba2Mixer, DynamicsInitialisation) {
  ParameterRegistry params;
  ModelConfig c = tiny(1, false, false);
  c.num_attention_heads = 512;
  c.num_key_value_heads = 512;
  layers::Mamba2Mixer mixer(c, kPrefix, params);
  params.materialize(Device::cpu(), DType::BF16, test::fresh_seed());
  for (double a : params.get(kPrefix + ".A_log").var->value.to_vector<double>()) EXPECT_LT(a, std::log(16.0));
  for (double d : params.get(kPrefix + ".D").var->value.to_vector<double>()) EXPECT_EQ(d, 1.0);
  for (double b : params.get(kPrefix + ".dt_bias").var->value.to_vector<double>()) {
    const double dt = std::log1p(std::exp(b));  // softplus(dt_bias) is the initial Δ
    EXPECT_GE(dt, 1e-3 * (1 - 1e-5));
    EXPECT_LE(dt, 0.1 * (1 + 1e-5));
  }
  EXPECT_EQ(params.get(kPrefix + ".A_log").var->value.dtype(), DType::F32);  // kept f32 under bf16
  for (double b : params.get(kPrefix + ".conv1d.bias").var->value.to_vector<double>()) EXPECT_EQ(b, 0.0);
}

struct LayerCase {
  int64_t kv_heads;
  bool qk_norm, pos_emb;
};

class Mamba2Gradients : public ::testing::TestWithParam<LayerCase> {};

// Finite differences through the whole layer in f64: x, both initial states and every parameter, with the
// checked scalar weighing y and both final states (so gradients flow out of them too).
TEST_P(Mamba2Gradients, InputParametersAndStatesMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const LayerCase lc = GetParam();
  const ModelConfig c = tiny(lc.kv_heads, lc.qk_norm, lc.pos_emb);
  ParameterRegistry params;
  layers::Mamba2Mixer mixer(c, kPrefix, params);
  params.materialize(Device::cpu(), DType::F64, seed);
  const int64_t B = 2, T = 7, conv_channels = 8 + 2 * 4 * lc.kv_heads;
  const layers::MixerState s0{{ag::constant(test::randn({B, conv_channels, 3}, seed + 2))},
                              {ag::constant(test::randn({B, 2, 4, 4}, seed + 3))}};
  test::run_mixer_gradcheck(mixer, params, test::randn({B, T, 8}, seed + 1), s0, context(c, B, T, 3), seed);
}

INSTANTIATE_TEST_SUITE_P(Variants, Mamba2Gradients,
                         ::testing::Values(LayerCase{1, true, false},    // GQA (2 query heads share 1), QK-norm
                                           LayerCase{2, true, true},     // one KV head per query head, RoPE
                                           LayerCase{1, false, false}),  // plain B and C
                         [](const auto& info) {
                           return std::string(info.param.kv_heads == 1 ? "Gqa" : "Mha") +
                                  (info.param.qk_norm ? "QkNorm" : "") + (info.param.pos_emb ? "Rope" : "");
                         });

TEST(Mamba2Mixer, DecodingTokenByTokenReproducesTheFullForward) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(1, true, true);
  ParameterRegistry params;
  layers::Mamba2Mixer mixer(c, kPrefix, params);
  params.materialize(Device::cpu(), DType::F64, seed);
  ag::NoGrad no_grad;
  const int64_t B = 2, T = 70;  // crosses a GLA chunk
  const Tensor x = test::randn({B, T, 8}, seed + 1);
  layers::MixerState full_state;
  const Tensor y_full = mixer.forward(ag::constant(x), context(c, B, T), nullptr, &full_state)->value;

  layers::MixerState state;
  std::vector<ag::Var> ys;
  for (int64_t t = 0; t < T; ++t) {
    layers::MixerState next;
    ys.push_back(mixer.forward(ag::constant(x.slice(1, t, t + 1).contiguous()), context(c, B, 1, t), &state, &next));
    state = next;
  }
  test::expect_close(ag::concat(ys, 1)->value, y_full, 1e-12, 1e30, "y");
  test::expect_close(state.conv[0]->value, full_state.conv[0]->value, 1e-14, 1e30, "conv state");
  test::expect_close(state.recurrent[0]->value, full_state.recurrent[0]->value, 1e-12, 1e30, "ssm state");
}

TEST(Mamba2Mixer, HybridModelLossFallsUnderAdamW) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ModelConfig c = tiny(1, true, false);
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_hidden_layers = 2;
  c.vocab_size = 32;
  c.layer_types = parse_hybrid_pattern("*-M2", "test");
  c.validate("test");
  // Random targets over 32 tokens start near ln 32 ≈ 3.47; memorising one batch must halve that.
  test::expect_hybrid_decoder_learns(c, 0.5, seed);
}

}  // namespace
}  // namespace primer
