// ops::sigmoid_gate (GKA's β and α, GDN's and GDN-2's β): the forward against the formula in f64 with and without a
// bias and offset, finite-difference gradients of a and bias, the autograd node against the unfused ops it replaces,
// and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/autograd/functions.h"
#include "core/ops/elementwise.h"
#include "core/ops/sigmoid_gate.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using test::expect_error;

TEST(SigmoidGate, EqualsSigmoidOfTheBiasedInputPlusOffset) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor a = test::randn({2, 3, 5}, seed, DType::F64, Device::cpu(), 4.0), bias = test::randn({5}, seed + 1);
  const auto av = a.to_vector<double>(), bv = bias.to_vector<double>();
  for (const bool with_bias : {true, false}) {
    const auto y = ops::sigmoid_gate(a, with_bias ? bias : Tensor(), 1e-6).to_vector<double>();
    for (size_t i = 0; i < av.size(); ++i) {
      const double z = av[i] + (with_bias ? bv[i % bv.size()] : 0.0);
      EXPECT_NEAR(y[i], 1.0 / (1.0 + std::exp(-z)) + 1e-6, 1e-15) << i;
    }
  }
  EXPECT_EQ(ops::sigmoid_gate(a.to(DType::F32), Tensor()).dtype(), DType::F32);
}

TEST(SigmoidGate, GradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(std::string(with_bias ? "with bias" : "no bias") + " seed " + std::to_string(seed));
    test::GradCheck check;
    check.inputs = {test::randn({3, 4, 6}, seed, DType::F64, Device::cpu(), 3.0)};
    check.names = {"a"};
    if (with_bias) {
      check.inputs.push_back(test::randn({6}, seed + 1));
      check.names.push_back("bias");
    }
    check.forward = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::sigmoid_gate(in[0], in.size() > 1 ? in[1] : Tensor(), 0.25)};
    };
    check.backward = [](const std::vector<Tensor>& in, const std::vector<Tensor>& gout) {
      const ops::SigmoidGateGrads g = ops::sigmoid_gate_backward(gout[0], in[0], in.size() > 1 ? in[1] : Tensor());
      std::vector<Tensor> grads{g.da};
      if (in.size() > 1) grads.push_back(g.dbias);
      return grads;
    };
    test::run_gradcheck(check, seed + 2);
  }
}

// The node gives what the ops it replaces gave: add the bias, sigmoid, add the offset.
TEST(SigmoidGate, AutogradNodeEqualsTheUnfusedOps) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor a = test::randn({4, 7, 3}, seed), bias = test::randn({3}, seed + 1),
               dy = test::randn({4, 7, 3}, seed + 2);
  const ag::Var a1 = ag::leaf(a), b1 = ag::leaf(bias);
  ag::backward(ag::sigmoid_gate(a1, b1, 0.5), dy);
  const ag::Var a2 = ag::leaf(a), b2 = ag::leaf(bias);
  const ag::Var unfused = ag::add(ag::unary(ops::Unary::Sigmoid, ag::add(a2, b2)),
                                  ag::constant(Tensor::full({1}, 0.5, DType::F64, Device::cpu())));
  ag::backward(unfused, dy);
  test::expect_close(a1->grad, a2->grad, 1e-14, 1e-15, "da");
  test::expect_close(b1->grad, b2->grad, 1e-13, 1e-14, "dbias");
}

TEST(SigmoidGate, RefusesMismatchedArguments) {
  const Tensor a = test::randn({2, 3, 4}, 1);
  expect_error([&] { ops::sigmoid_gate(a, test::randn({3}, 2)); }, {"sigmoid_gate", "bias", "[4]"});
  expect_error([&] { ops::sigmoid_gate(a, test::randn({4}, 2, DType::F32)); }, {"sigmoid_gate", "bias"});
  expect_error(
      [&] {
        ops::sigmoid_gate_backward(test::randn({2, 3, 5}, 3), a, Tensor());
      },
      {"sigmoid_gate_backward", "dy"});
  expect_error(
      [&] {
        ops::sigmoid_gate_backward(test::randn({2, 3, 4}, 3, DType::F32), a, Tensor());
      },
      {"sigmoid_gate_backward", "dy"});
}

}  // namespace
}  // namespace primer
