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
  // Norm weights and conv biases start at constants; randomise them so their gradients are exercised generically.
  for (Parameter* p : params.all()) p->var->value = test::randn(p->shape, seed + p->name.size() * 31, DType::F64, Device::cpu(), 0.5);
  const Tensor ids = test::rand_ints({2, 5}, seed + 1, 0, 11);
  std::vector<int32_t> t = test::rand_ints({2, 5}, seed + 2, 0, 11).to_vector<int32_t>();
  t[3] = -100;  // an ignored target
  const Tensor targets = Tensor::from_vector(t, {2, 5}, DType::I32);

  test::GradCheck check;
  for (Parameter* p : params.all()) {
    check.inputs.push_back(p->var->value);
    check.names.push_back(p->name);
  }
  auto set_values = [&](const std::vector<Tensor>& ins) {
    const auto all = params.all();
    for (size_t k = 0; k < all.size(); ++k) all[k]->var->value = ins[k];
  };
  check.forward = [&](const std::vector<Tensor>& ins) {
    set_values(ins);
    ag::NoGrad no_grad;
    return std::vector<Tensor>{model.loss(ids, targets, 1.0)->value};
  };
  check.backward = [&](const std::vector<Tensor>& ins, const std::vector<Tensor>& gout) {
    set_values(ins);
    for (Parameter* p : params.all()) p->var->grad = Tensor();
    // The fused loss produces gradients of grad_scale * loss: the output weight enters as grad_scale.
    ag::Var loss = model.loss(ids, targets, gout[0].item());
    ag::backward(loss);
    std::vector<Tensor> grads;
    for (Parameter* p : params.all()) grads.push_back(p->var->grad);
    return grads;
  };
  test::run_gradcheck(check, seed + 3);
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
