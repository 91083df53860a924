// The Gated KalmaNet mixer on the CPU: the reference implementation's names and shapes under every flag; the whole
// layer in f64 against finite differences for the input, every parameter, the initial states (conv, H, S) and
// gradients arriving at the final states; decoding token by token with the carried state reproduces the full
// forward; the num_iter knob; a hybrid "*-GKA" decoder trains.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/functions.h"
#include "layers/decoder_lm.h"
#include "layers/gka_mixer.h"
#include "optim/adamw.h"
#include "tests/support/mixer_checks.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

struct Variant {
  const char* name;
  int64_t q_heads, kv_heads;
  bool beta, alpha, v_conv, forgetting, forgetting_kk, gate, gla_rescale;
  int64_t kv_proj_rank = 0;  // Adaptive GQA when > 0
  bool kv_learnable_residual = false;
};
const Variant kVariants[] = {
    {"gqa_defaults", 4, 2, true, true, true, true, true, true, true},
    {"paper_no_beta_no_vconv_no_gate", 2, 2, false, true, false, true, true, false, false},
    {"no_alpha_decay_on_readout_only", 2, 2, true, false, true, true, false, true, true},
    {"no_forgetting_gate", 2, 2, true, true, true, false, true, true, true},
    {"adaptive_gqa_learnable_residual", 4, 2, true, true, true, true, true, true, true, 3, true},
};

ModelConfig tiny(const Variant& v) {
  ModelConfig c = test::tiny_mixer_config(v.q_heads, v.kv_heads);
  c.gka.use_beta_gate = v.beta;
  c.gka.use_alpha_connection = v.alpha;
  c.gka.use_v_conv = v.v_conv;
  c.gka.use_forgetting_gate = v.forgetting;
  c.gka.use_forgetting_gate_kk = v.forgetting_kk;
  c.gka.use_gate = v.gate;
  c.gka.gla_rescale = v.gla_rescale;
  c.gka.conv_size = 3;
  if (v.kv_proj_rank > 0) c.gka.kv_proj_rank = v.kv_proj_rank;
  c.gka.kv_learnable_residual = v.kv_learnable_residual;
  return c;
}

// A random initial state: per conv the last conv_size − 1 inputs; H symmetric PSD (a key covariance: A Aᵀ / D),
// S any matrix.
layers::MixerState random_state(const ModelConfig& c, int64_t B, uint64_t seed) {
  layers::MixerState s;
  const int64_t H = std::max(c.num_attention_heads, c.num_key_value_heads), D = c.head_dim;
  std::vector<int64_t> conv_heads{c.num_attention_heads, c.num_key_value_heads};
  if (c.gka.use_v_conv) conv_heads.push_back(c.num_key_value_heads);
  for (int64_t heads : conv_heads)
    s.conv.push_back(ag::constant(test::randn({B, heads * D, c.gka.conv_size - 1}, seed + 10 * s.conv.size())));
  const Tensor A = test::randn({B, H, D, D}, seed + 98);
  Tensor cov = Tensor::zeros({B, H, D, D}, DType::F64);
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < D; ++i)
      for (int64_t j = 0; j < D; ++j)
        for (int64_t l = 0; l < D; ++l)
          cov.data<double>()[(bh * D + i) * D + j] +=
              A.data<double>()[(bh * D + i) * D + l] * A.data<double>()[(bh * D + j) * D + l] / double(D);
  s.recurrent.push_back(ag::constant(cov));
  s.recurrent.push_back(ag::constant(test::randn({B, H, D, D}, seed + 99, DType::F64, Device::cpu(), 0.5)));
  return s;
}

TEST(GkaMixer, RegistersTheReferenceNamesAndShapes) {
  ModelConfig c = tiny(kVariants[0]);
  c.layer_types = {MixerKind::Attention, MixerKind::GatedKalmaNet};
  ParameterRegistry params;
  layers::DecoderLM model(c, params);
  const std::string p = "model.layers.1.gka.";
  test::expect_parameter_shapes(params, p,
                                {{"q_proj.weight", {16, 8}},
                                 {"k_proj.weight", {8, 8}},
                                 {"v_proj.weight", {8, 8}},
                                 {"a_proj.weight", {4, 8}},
                                 {"b_proj.weight", {4, 8}},
                                 {"b_proj.bias", {4}},
                                 {"alpha_proj.weight", {4, 8}},
                                 {"alpha_proj.bias", {4}},
                                 {"A_log", {4}},
                                 {"dt_bias", {4}},
                                 {"q_conv1d.weight", {16, 1, 3}},
                                 {"k_conv1d.weight", {8, 1, 3}},
                                 {"v_conv1d.weight", {8, 1, 3}},
                                 {"g_proj.weight", {16, 8}},
                                 {"o_norm.weight", {4}},
                                 {"o_proj.weight", {8, 16}}},
                                true);
  test::expect_ssm_decay_parameters(params, p);  // materializes them
  // The gate biases start at 0 (β = α = ½).
  for (float b : params.get(p + "b_proj.bias").master.to_vector<float>()) EXPECT_EQ(b, 0.f);

  // Flags off drop their parameters.
  ModelConfig off = tiny(kVariants[1]);
  off.gka.use_alpha_connection = false;
  ParameterRegistry few;
  layers::GkaMixer mixer(off, "gka", few);
  for (const char* name :
       {"b_proj.weight", "b_proj.bias", "alpha_proj.weight", "alpha_proj.bias", "v_conv1d.weight", "g_proj.weight"})
    EXPECT_FALSE(few.contains(std::string("gka.") + name)) << name;
  EXPECT_TRUE(few.contains("gka.a_proj.weight"));
}

// Adaptive GQA starts as plain GQA (zero low-rank output, replication residual): same output at Stage 0.
TEST(GkaMixer, AdaptiveGqaStartsAsPlainGqa) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig agqa = tiny(kVariants[4]);
  ModelConfig plain = agqa;
  plain.gka.kv_proj_rank.reset();
  test::expect_adaptive_gqa_starts_as_plain<layers::GkaMixer>(agqa, plain, "gka", {"proj_v.linearB.weight", "k_rep"},
                                                              seed, 1e-13);
}

class GkaMixerVariants : public ::testing::TestWithParam<Variant> {};

TEST_P(GkaMixerVariants, LayerGradientsMatchFiniteDifferences) {
  // The solve's backward is the gradient of the exact ridge regression; it is the gradient of the iteration once
  // that has converged: a large ridge (κ ≤ 2.3, R_a = 0.21) and 40 iterations put the iteration error near 1e-27.
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ModelConfig c = tiny(GetParam());
  c.gka.ridge_strength = 0.75;
  c.gka.num_iter = 40;
  // Without the forgetting gate the reference still has its parameters; nothing reads them.
  const std::vector<std::string> unused =
      c.gka.use_forgetting_gate ? std::vector<std::string>{}
                                : std::vector<std::string>{"gka.a_proj.weight", "gka.A_log", "gka.dt_bias"};
  test::check_layer_gradients(
      c.hidden_size, [&](ParameterRegistry& p) { return layers::GkaMixer(c, "gka", p); },
      [&](int64_t B, uint64_t s) { return random_state(c, B, s); }, seed, unused);
}

// Decoding one token at a time, each call starting from the previous call's state, reproduces the full forward
// (outputs and final states), from zeros and from a given initial state, at the default ridge and num_iter.
TEST_P(GkaMixerVariants, DecodingTokenByTokenReproducesTheFullForward) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(GetParam());
  test::check_decoding(
      c.hidden_size, [&](ParameterRegistry& p) { return layers::GkaMixer(c, "gka", p); },
      [&](int64_t B, uint64_t s) { return random_state(c, B, s); }, seed, 1e-11);
}

INSTANTIATE_TEST_SUITE_P(Flags, GkaMixerVariants, ::testing::ValuesIn(kVariants),
                         [](const auto& i) { return std::string(i.param.name); });

// The test-time compute knob changes later forward calls: fewer iterations leave the solve further from converged.
TEST(GkaMixer, NumIterIsAKnobAtRunTime) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(kVariants[0]);
  ParameterRegistry params;
  layers::GkaMixer mixer(c, "gka", params);
  params.materialize(Device::cpu(), DType::F64, seed);
  ag::NoGrad no_grad;
  const ag::Var x = ag::constant(test::randn({2, 20, c.hidden_size}, seed + 1));
  EXPECT_EQ(mixer.num_iter(), 30);
  const Tensor converged = (mixer.set_num_iter(200), mixer.forward(x, {})->value);
  const Tensor r30 = (mixer.set_num_iter(30), mixer.forward(x, {})->value);
  const Tensor r2 = (mixer.set_num_iter(2), mixer.forward(x, {})->value);
  EXPECT_EQ(mixer.num_iter(), 2);
  const double e30 = test::compare(r30, converged).rel_l2, e2 = test::compare(r2, converged).rel_l2;
  EXPECT_GT(e2, 10 * e30) << "r = 2: " << e2 << ", r = 30: " << e30;
  EXPECT_GT(mixer.flops_per_token(20), 0);
  test::expect_error([&] { mixer.set_num_iter(-1); }, {"num_iter is -1"});
}

// A hybrid decoder (attention, then Gated KalmaNet) memorises a fixed batch on the CPU: the loss falls.
TEST(GkaMixer, HybridDecoderTrains) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Random targets over 13 tokens start near ln 13 ≈ 2.56; 30 steps of memorisation must cut that clearly.
  test::expect_hybrid_decoder_learns(test::small_hybrid(tiny(kVariants[0]), "*-GKA"), 0.7, seed);
}

}  // namespace
}  // namespace primer
