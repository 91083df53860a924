#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/functions.h"
#include "layers/ssm_blocks.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using Fn = std::function<ag::Var(const std::vector<ag::Var>&)>;

// Finite-difference check of an ag composition in f64: every input is a leaf that wants its gradient.
void gradcheck_ag(const std::vector<Tensor>& inputs, const std::vector<std::string>& names, const Fn& fn,
                  uint64_t seed) {
  test::GradCheck check;
  check.inputs = inputs;
  check.names = names;
  check.forward = [&](const std::vector<Tensor>& in) {
    ag::NoGrad no_grad;
    std::vector<ag::Var> v;
    for (const Tensor& t : in) v.push_back(ag::constant(t));
    return std::vector<Tensor>{fn(v)->value};
  };
  check.backward = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& g) {
    std::vector<ag::Var> v;
    for (const Tensor& t : in) v.push_back(ag::leaf(t));
    ag::Var y = fn(v);
    y->grad = g[0];
    ag::current_tape().backward();
    std::vector<Tensor> out;
    for (const ag::Var& x : v) out.push_back(x->grad);
    return out;
  };
  test::run_gradcheck(check, seed);
}

TEST(SsmBlocks, ExpandHeadsRepeatsEachKvHeadInPlace) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor x = test::randn({2, 3, 2, 4}, seed);
  const Tensor y = layers::expand_heads(ag::constant(x), 3)->value;
  ASSERT_EQ(y.shape(), (Shape{2, 3, 6, 4}));
  const auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (int64_t bt = 0; bt < 6; ++bt)
    for (int64_t h = 0; h < 6; ++h)
      for (int64_t d = 0; d < 4; ++d) EXPECT_EQ(yv[size_t((bt * 6 + h) * 4 + d)], xv[size_t((bt * 2 + h / 3) * 4 + d)]);
  gradcheck_ag(
      {x}, {"x"}, [](const auto& v) { return layers::expand_heads(v[0], 3); }, seed);
}

TEST(SsmBlocks, L2NormalizeHasEpsInsideTheRoot) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor x = test::randn({3, 5, 8}, seed, DType::F64, Device::cpu(), 0.1);
  const double eps = 1e-2;  // large enough to matter at these norms
  const auto yv = layers::l2_normalize(ag::constant(x), eps)->value.to_vector<double>();
  const auto xv = x.to_vector<double>();
  for (size_t r = 0; r < 15; ++r) {
    double ss = 0;
    for (size_t d = 0; d < 8; ++d) ss += xv[r * 8 + d] * xv[r * 8 + d];
    for (size_t d = 0; d < 8; ++d) EXPECT_NEAR(yv[r * 8 + d], xv[r * 8 + d] / std::sqrt(ss + eps), 1e-14);
  }
  gradcheck_ag(
      {x}, {"x"}, [eps](const auto& v) { return layers::l2_normalize(v[0], eps); }, seed);
}

TEST(SsmBlocks, GatedRmsNormNormalisesThenGates) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor o = test::randn({2, 3, 2, 4}, seed), w = test::randn({4}, seed + 1),
               z = test::randn({2, 3, 2, 4}, seed + 2);
  const auto y =
      layers::gated_rmsnorm(ag::constant(o), ag::constant(w), ag::constant(z), 1e-5)->value.to_vector<double>();
  const auto ov = o.to_vector<double>(), wv = w.to_vector<double>(), zv = z.to_vector<double>();
  for (size_t r = 0; r < 12; ++r) {
    double ms = 0;
    for (size_t d = 0; d < 4; ++d) ms += ov[r * 4 + d] * ov[r * 4 + d] / 4;
    for (size_t d = 0; d < 4; ++d) {
      const double zz = zv[r * 4 + d];
      EXPECT_NEAR(y[r * 4 + d], ov[r * 4 + d] / std::sqrt(ms + 1e-5) * wv[d] * zz / (1 + std::exp(-zz)), 1e-13);
    }
  }
  gradcheck_ag(
      {o, w, z}, {"o", "w", "gate"}, [](const auto& v) { return layers::gated_rmsnorm(v[0], v[1], v[2], 1e-5); }, seed);
}

}  // namespace
}  // namespace primer

#include "layers/kv_expansion.h"

namespace primer {
namespace {

TEST(KvExpansion, StartsAsPlainGqaAndHasFiniteDifferenceGradients) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T = 3, Hk = 2, H = 6, D = 4, rank = 3;
  for (const bool learnable : {false, true}) {
    SCOPED_TRACE(learnable ? "learnable residual" : "fixed residual");
    ParameterRegistry params;
    layers::KvExpansion expand("model.layers.0.gka", "k", rank, Hk, H, D, learnable, 0.02, params);
    EXPECT_TRUE(params.contains("model.layers.0.gka.proj_k.linearA.weight"));
    EXPECT_TRUE(params.contains("model.layers.0.gka.proj_k.linearB.weight"));
    EXPECT_EQ(params.contains("model.layers.0.gka.k_rep"), learnable);
    params.materialize(Device::cpu(), DType::F64, seed);
    const Tensor x = test::randn({B, T, Hk, D}, seed + 1);
    {
      ag::NoGrad no_grad;
      test::expect_close(expand.forward(ag::constant(x))->value, layers::expand_heads(ag::constant(x), H / Hk)->value,
                         0, 0, "Stage 0 init is GQA repetition");
    }
    const Tensor target = test::randn({B, T, H, D}, seed + 2);
    test::run_model_gradcheck(
        params, [&](double s) { return ag::scale(ag::mse_loss(expand.forward(ag::constant(x)), target), s); }, seed);
  }
}

}  // namespace
}  // namespace primer
