// ag::linear_joined (narrow projections of one input as one GEMM): outputs and gradients equal one ag::linear per
// weight, with accumulating (parameter) and plain weights, an output that receives no gradient, and an input that
// already holds a gradient from another use.
#include <gtest/gtest.h>

#include <string>

#include "core/autograd/functions.h"
#include "core/ops/elementwise.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

struct Grads {
  std::vector<Tensor> outputs, weights;
  Tensor x;
};

// x [2, 5, 6] and weights of 3, 1 and 4 rows; the loss scores outputs 0 and 2 only, plus an earlier use of x.
Grads run(bool joined, uint64_t seed) {
  const ag::Var x = ag::leaf(test::randn({2, 5, 6}, seed), "x");
  std::vector<ag::Var> weights;
  for (const int64_t rows : {3, 1, 4}) weights.push_back(ag::leaf(test::randn({rows, 6}, seed + uint64_t(rows)), "w"));
  weights[0]->accumulates = true;  // a parameter: its gradient grows in place
  const ag::Var earlier = ag::linear(x, ag::constant(test::randn({2, 6}, seed + 9)));
  std::vector<ag::Var> ys;
  if (joined) {
    ys = ag::linear_joined(x, weights);
  } else {
    for (const ag::Var& w : weights) ys.push_back(ag::linear(x, w));
  }
  ag::Var loss;
  for (const auto& [y, key] :
       {std::pair{ys[0], seed + 10}, std::pair{ys[2], seed + 12}, std::pair{earlier, seed + 13}}) {
    const ag::Var term = ag::sum(ag::reshape(ag::mul(y, ag::constant(test::randn(y->value.shape(), key))), {-1}), 0);
    loss = loss ? ag::add(loss, term) : term;
  }
  ag::backward(loss);
  Grads g;
  for (const ag::Var& y : ys) g.outputs.push_back(y->value);
  for (const ag::Var& w : weights) g.weights.push_back(w->grad);
  g.x = x->grad;
  return g;
}

TEST(LinearJoined, EqualsOneLinearPerWeight) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Grads joined = run(true, seed), separate = run(false, seed);
  for (size_t i = 0; i < joined.outputs.size(); ++i)
    test::expect_close(joined.outputs[i], separate.outputs[i], 1e-15, 1e-14, "output " + std::to_string(i));
  // The unscored output's weight: zeros from the joined GEMM, no gradient at all from its own linear.
  auto or_zeros = [](const Tensor& g, const Tensor& like) {
    return g.defined() ? g : Tensor::zeros(like.shape(), DType::F64);
  };
  for (size_t i = 0; i < joined.weights.size(); ++i)
    test::expect_close(joined.weights[i].view({-1}), or_zeros(separate.weights[i], joined.weights[i]).view({-1}), 1e-15,
                       1e-14, "weight " + std::to_string(i));
  test::expect_close(joined.x, separate.x, 1e-14, 1e-13, "x");
}

TEST(LinearJoined, RefusesWeightsOfAnotherWidth) {
  const ag::Var x = ag::leaf(test::randn({2, 3, 6}, 1));
  test::expect_error(
      [&] {
        ag::linear_joined(x, {ag::leaf(test::randn({2, 6}, 2)), ag::leaf(test::randn({2, 5}, 3))});
      },
      {"linear_joined", "[rows, 6]"});
}

}  // namespace
}  // namespace primer
