// ag::causal_conv1d_parts (one short conv over channels held as separate tensors, as Mamba-2's x | B | C): the
// outputs, final state and every gradient equal one ag::causal_conv1d over the joined channels, with and without a
// carried state, for T shorter than the window and longer, and when a part's output receives no gradient.
#include <gtest/gtest.h>

#include <string>

#include "core/autograd/functions.h"
#include "core/autograd/slicing.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

constexpr int64_t kB = 2, kTaps = 4;
const std::vector<int64_t> kWidths = {3, 2, 5};

struct ConvRun {
  std::vector<Tensor> outputs;  // the parts' outputs, then the final state (if carried)
  std::vector<Tensor> grads;    // the parts', w's, bias's, then state_in's (if carried)
};

// Σ_i <y_i, R_i> (+ <state_out, R_s>) over the parts in `scored`, differentiated; `joined` runs one conv over the
// joined channels and splits its output.
ConvRun run(bool joined, int64_t T, bool carry_state, const std::vector<size_t>& scored, uint64_t seed) {
  std::vector<ag::Var> parts;
  for (size_t i = 0; i < kWidths.size(); ++i) parts.push_back(ag::leaf(test::randn({kB, T, kWidths[i]}, seed + i)));
  const int64_t C = 10;
  const ag::Var w = ag::leaf(test::randn({C, kTaps}, seed + 10, DType::F64, Device::cpu(), 0.5));
  const ag::Var bias = ag::leaf(test::randn({C}, seed + 11));
  const ag::Var state_in = carry_state ? ag::leaf(test::randn({kB, C, kTaps - 1}, seed + 12)) : nullptr;
  ag::Var state_out;
  std::vector<ag::Var> ys;
  if (joined) {
    ys = ag::split(ag::causal_conv1d(ag::concat(parts, 2), w, bias, true, state_in, carry_state ? &state_out : nullptr),
                   2, kWidths);
  } else {
    ys = ag::causal_conv1d_parts(parts, w, bias, true, state_in, carry_state ? &state_out : nullptr);
  }
  ConvRun r;
  ag::Var loss;
  auto add_score = [&](const ag::Var& y, uint64_t key) {
    const ag::Var term = ag::sum(ag::reshape(ag::mul(y, ag::constant(test::randn(y->value.shape(), key))), {-1}), 0);
    loss = loss ? ag::add(loss, term) : term;
  };
  for (const size_t i : scored) add_score(ys[i], seed + 20 + i);
  if (carry_state) add_score(state_out, seed + 30);
  ag::backward(loss);
  for (const ag::Var& y : ys) r.outputs.push_back(y->value);
  if (carry_state) r.outputs.push_back(state_out->value);
  for (const ag::Var& p : parts)
    r.grads.push_back(p->grad.defined() ? p->grad : Tensor::zeros(p->value.shape(), DType::F64));
  r.grads.push_back(w->grad);
  r.grads.push_back(bias->grad);
  if (carry_state) r.grads.push_back(state_in->grad);
  return r;
}

TEST(CausalConv1dParts, EqualsOneConvOverTheJoinedChannels) {
  const uint64_t seed = test::fresh_seed();
  for (const int64_t T : {2, 9})
    for (const bool carry_state : {false, true})
      for (const std::vector<size_t>& scored : {std::vector<size_t>{0, 1, 2}, std::vector<size_t>{0, 2}}) {
        SCOPED_TRACE("T " + std::to_string(T) + (carry_state ? " with state" : "") + " scored parts " +
                     std::to_string(scored.size()) + " seed " + std::to_string(seed));
        const ConvRun parts = run(false, T, carry_state, scored, seed),
                      joined = run(true, T, carry_state, scored, seed);
        ASSERT_EQ(parts.outputs.size(), joined.outputs.size());
        ASSERT_EQ(parts.grads.size(), joined.grads.size());
        for (size_t i = 0; i < parts.outputs.size(); ++i)
          test::expect_close(parts.outputs[i], joined.outputs[i], 1e-15, 1e-14, "output " + std::to_string(i));
        for (size_t i = 0; i < parts.grads.size(); ++i)
          test::expect_close(parts.grads[i], joined.grads[i], 1e-14, 1e-13, "gradient " + std::to_string(i));
      }
}

TEST(CausalConv1dParts, RefusesPartsThatDoNotCoverTheWeight) {
  const ag::Var w = ag::leaf(test::randn({6, kTaps}, 1));
  const std::vector<ag::Var> parts = {ag::leaf(test::randn({kB, 5, 2}, 2)), ag::leaf(test::randn({kB, 5, 3}, 3))};
  test::expect_error([&] { ag::causal_conv1d_parts(parts, w, nullptr, true, nullptr, nullptr); },
                     {"causal_conv1d_parts", "5 channels"});
}

}  // namespace
}  // namespace primer
