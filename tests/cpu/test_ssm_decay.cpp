// ops::ssm_decay (the log-space decay of Mamba-2, GDN, GKA and GDN-2, with Mamba-2's step Δ): the forward against
// the formula in f64, per head and per head and channel (GDN-2's A_log [H] with dt_bias [H, D]), finite-difference
// gradients of a, A_log and dt_bias through g and Δ together and through g alone, the autograd node, and argument
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/autograd/functions.h"
#include "core/ops/ssm_decay.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using test::expect_error;

struct Layout {
  std::string name;
  Shape a, A_log, dt_bias;
};

// Mamba-2/GDN/GKA: one value per head; GDN-2: per head and channel with A_log per head.
const std::vector<Layout> kLayouts = {
    {"per_head", {2, 3, 4}, {4}, {4}},
    {"per_channel", {2, 3, 2, 3}, {2}, {2, 3}},
};

TEST(SsmDecay, EqualsMinusExpALogTimesSoftplus) {
  const uint64_t seed = test::fresh_seed();
  for (const Layout& l : kLayouts) {
    SCOPED_TRACE(l.name + " seed " + std::to_string(seed));
    const Tensor a = test::randn(l.a, seed, DType::F64, Device::cpu(), 3.0), A_log = test::randn(l.A_log, seed + 1),
                 dt_bias = test::randn(l.dt_bias, seed + 2);
    Tensor delta;
    const auto g = ops::ssm_decay(a, A_log, dt_bias, &delta).to_vector<double>();
    const auto d = delta.to_vector<double>(), av = a.to_vector<double>(), lv = A_log.to_vector<double>(),
               bv = dt_bias.to_vector<double>();
    const size_t P = bv.size(), group = P / lv.size();
    for (size_t i = 0; i < av.size(); ++i) {
      const double step = std::log1p(std::exp(av[i] + bv[i % P]));
      EXPECT_NEAR(d[i], step, 1e-14 * (1 + step));
      EXPECT_NEAR(g[i], -std::exp(lv[i % P / group]) * step, 1e-13 * (1 + std::abs(g[i])));
    }
  }
}

TEST(SsmDecay, GradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  for (const Layout& l : kLayouts)
    for (const bool with_delta : {true, false}) {
      SCOPED_TRACE(l.name + (with_delta ? " g and delta" : " g alone") + " seed " + std::to_string(seed));
      test::GradCheck check;
      check.inputs = {test::randn(l.a, seed, DType::F64, Device::cpu(), 3.0), test::randn(l.A_log, seed + 1),
                      test::randn(l.dt_bias, seed + 2)};
      check.names = {"a", "A_log", "dt_bias"};
      check.forward = [with_delta](const std::vector<Tensor>& in) {
        Tensor delta;
        std::vector<Tensor> outs{ops::ssm_decay(in[0], in[1], in[2], with_delta ? &delta : nullptr)};
        if (with_delta) outs.push_back(delta);
        return outs;
      };
      check.backward = [with_delta](const std::vector<Tensor>& in, const std::vector<Tensor>& gout) {
        const ops::SsmDecayGrads g =
            ops::ssm_decay_backward(gout[0], with_delta ? gout[1] : Tensor(), in[0], in[1], in[2]);
        return std::vector<Tensor>{g.da, g.dA_log, g.ddt_bias};
      };
      test::run_gradcheck(check, seed + 3);
    }
}

// The node hands each output's gradient to the op's backward, also when only Δ receives one.
TEST(SsmDecay, AutogradNodeTakesEitherOutputsGradient) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Layout& l = kLayouts[0];
  const Tensor a = test::randn(l.a, seed), A_log = test::randn(l.A_log, seed + 1),
               bias = test::randn(l.dt_bias, seed + 2);
  const Tensor ddelta = test::randn(l.a, seed + 3);
  const ag::Var av = ag::leaf(a), Av = ag::leaf(A_log), bv = ag::leaf(bias);
  ag::Var delta;
  ag::ssm_decay(av, Av, bv, &delta);
  ag::backward(delta, ddelta);
  const ops::SsmDecayGrads g = ops::ssm_decay_backward(Tensor(), ddelta, a, A_log, bias);
  test::expect_close(av->grad, g.da, 0, 0, "da");
  test::expect_close(Av->grad, g.dA_log, 0, 0, "dA_log (zero: g had no gradient)");
  test::expect_close(bv->grad, g.ddt_bias, 0, 0, "ddt_bias");
}

TEST(SsmDecay, RefusesMismatchedArguments) {
  const Tensor a = test::randn({2, 3, 4}, 1);
  expect_error([&] { ops::ssm_decay(a, test::randn({4}, 2), test::randn({3}, 3)); },
               {"ssm_decay", "dt_bias's shape [3]"});
  expect_error([&] { ops::ssm_decay(a, test::randn({3}, 2), test::randn({4}, 3)); },
               {"ssm_decay", "A_log", "equal groups"});
  expect_error([&] { ops::ssm_decay(a, test::randn({4}, 2, DType::F32), test::randn({4}, 3)); },
               {"ssm_decay", "dt_bias"});
  expect_error(
      [&] {
        ops::ssm_decay_backward(test::randn({2, 3, 5}, 4), Tensor(), a, test::randn({4}, 2), test::randn({4}, 3));
      },
      {"ssm_decay_backward", "dg"});
}

}  // namespace
}  // namespace primer
