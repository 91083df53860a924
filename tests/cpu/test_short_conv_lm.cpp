// The default model end to end in f64: gradients of every parameter against finite differences, and the
// recomputing (activation-checkpointed) variant against the plain one.
#include <gtest/gtest.h>

#include "layers/short_conv_lm.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

layers::ShortConvLMConfig tiny_config() {
  layers::ShortConvLMConfig c;
  c.vocab = 11;
  c.hidden = 6;
  c.layers = 2;
  c.ffn = 10;
  c.conv_size = 3;
  return c;
}

TEST(ShortConvLM, AllParameterGradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ParameterRegistry params;
  layers::ShortConvLM model(tiny_config(), params);
  params.materialize(Device::cpu(), DType::F64, seed);
  const Tensor ids = test::rand_ints({2, 5}, seed + 1, 0, 11);
  std::vector<int32_t> t = test::rand_ints({2, 5}, seed + 2, 0, 11).to_vector<int32_t>();
  t[3] = -100;  // an ignored target
  const Tensor targets = Tensor::from_vector(t, {2, 5}, DType::I32);

  test::run_model_gradcheck(
      params, [&](double scale) { return model.loss(ids, targets, scale); }, seed);
}

TEST(ShortConvLM, RecomputationGivesIdenticalGradients) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto grads = [&](bool recompute) {
    layers::ShortConvLMConfig c = tiny_config();
    c.recompute = recompute;
    ParameterRegistry params;
    layers::ShortConvLM model(c, params);
    params.materialize(Device::cpu(), DType::F32, seed);
    const Tensor ids = test::rand_ints({3, 7}, seed + 1, 0, 11);
    const Tensor targets = test::rand_ints({3, 7}, seed + 2, 0, 11);
    ag::backward(model.loss(ids, targets, 1.0 / 21));
    std::vector<std::vector<float>> out;
    for (Parameter* p : params.all()) out.push_back(p->var->grad.to_vector<float>());
    return out;
  };
  EXPECT_EQ(grads(true), grads(false));
}

}  // namespace
}  // namespace primer
