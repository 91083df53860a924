// Autograd semantics: gradient assignment vs accumulation, NoGrad, and recomputation equivalence.
#include <gtest/gtest.h>

#include "core/autograd/chebyshev_solve.h"
#include "core/autograd/checkpoint.h"
#include "core/autograd/functions.h"
#include "core/ops/elementwise.h"
#include "core/ops/rope.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using ag::Var;

TEST(Autograd, ActivationGradientsSumWherePathsMergeAndParametersAccumulate) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Var x = ag::leaf(test::randn({3, 4}, seed), "x");
  Var w = ag::leaf(test::randn({3, 4}, seed + 1), "w");
  w->accumulates = true;
  // y = x*w + x  → dy/dx = w + 1 (two paths merge at x), dy/dw = x.
  Var y = ag::add(ag::mul(x, w), x);
  ag::backward(y);
  const auto xv = x->value.to_vector<double>(), wv = w->value.to_vector<double>();
  auto gx = x->grad.to_vector<double>(), gw = w->grad.to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_DOUBLE_EQ(gx[i], wv[i] + 1.0);
    EXPECT_DOUBLE_EQ(gw[i], xv[i]);
  }
  // A second backward accumulates into the parameter-like buffer (+=) but starts activations afresh.
  x->grad = Tensor();
  Var y2 = ag::mul(x, w);
  ag::backward(y2);
  gw = w->grad.to_vector<double>();
  gx = x->grad.to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_DOUBLE_EQ(gw[i], 2 * xv[i]);
    EXPECT_DOUBLE_EQ(gx[i], wv[i]);
  }
}

TEST(Autograd, NoGradRecordsNothing) {
  Var x = ag::leaf(test::randn({5}, test::fresh_seed()), "x");
  const size_t before = ag::current_tape().size();
  {
    ag::NoGrad guard;
    Var y = ag::scale(ag::unary(ops::Unary::Exp, x), 2.0);
    EXPECT_FALSE(y->requires_grad);
  }
  EXPECT_EQ(ag::current_tape().size(), before);
}

TEST(Autograd, RecomputedBlockGivesIdenticalGradients) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor x0 = test::randn({2, 6, 8}, seed);
  const Tensor w0 = test::randn({8}, seed + 1);
  const Tensor m0 = test::randn({5, 8}, seed + 2);
  const Tensor n0 = test::randn({8, 5}, seed + 4);
  auto run = [&](bool recompute) {
    Var x = ag::leaf(x0.clone(), "x");
    Var w = ag::leaf(w0.clone(), "w");
    w->accumulates = true;
    Var m = ag::leaf(m0.clone(), "m");
    m->accumulates = true;
    Var n = ag::leaf(n0.clone(), "n");
    n->accumulates = true;
    ag::BlockFn block = [&](const std::vector<Var>& in) {
      Var h = ag::rmsnorm(in[0], w, 1e-6);
      return std::vector<Var>{ag::add(in[0], ag::unary(ops::Unary::Silu, ag::linear(ag::linear(h, m), n)))};
    };
    Var y = recompute ? ag::checkpoint("block", block, {x})[0] : block({x})[0];
    Var loss = ag::mul(y, ag::constant(test::randn(y->value.shape(), seed + 3)));
    ag::backward(loss);
    return std::vector<Tensor>{x->grad, w->grad, m->grad, n->grad};
  };
  const auto plain = run(false), recomputed = run(true);
  // Same ops on the same inputs in the same order: identical up to the last bit.
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_EQ(recomputed[i].to_vector<double>(), plain[i].to_vector<double>()) << "gradient " << i;
}

// A block whose costly op forms its result through kept_across_recompute: y = x ⊙ (x·2), the product kept.
struct CountedBlock {
  int computed = 0;  // times the kept op's compute() ran
  ag::BlockFn fn() {
    return [this](const std::vector<Var>& in) {
      const Tensor doubled = ag::kept_across_recompute("doubling", [&] {
        ++computed;
        return std::vector<Tensor>{ops::scale(in[0]->value, 2.0)};
      })[0];
      return std::vector<Var>{ag::mul(in[0], ag::constant(doubled))};
    };
  }
};

TEST(Autograd, SelectiveRecomputationHandsTheKeptResultsBack) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor x0 = test::randn({3, 4}, seed), dy = test::randn({3, 4}, seed + 1);
  auto run = [&](bool keep, int* computed) {
    CountedBlock block;
    Var x = ag::leaf(x0);
    ag::backward(ag::checkpoint("block", block.fn(), {x}, keep)[0], dy);
    *computed = block.computed;
    return x->grad.to_vector<double>();
  };
  int kept_runs = 0, full_runs = 0;
  EXPECT_EQ(run(true, &kept_runs), run(false, &full_runs));
  EXPECT_EQ(kept_runs, 1);  // the recompute took the first forward's result
  EXPECT_EQ(full_runs, 2);
  CountedBlock outside;  // no checkpoint: just computed
  outside.fn()({ag::leaf(x0)});
  EXPECT_EQ(outside.computed, 1);
  CountedBlock unkept;  // in a NothingKept scope the recompute computes again
  const ag::BlockFn inner = unkept.fn();
  Var x = ag::leaf(x0);
  const ag::BlockFn fn = [&](const std::vector<Var>& in) {
    const ag::NothingKept nothing_kept;
    return inner(in);
  };
  ag::backward(ag::checkpoint("block", fn, {x})[0], dy);
  EXPECT_EQ(unkept.computed, 2);
  EXPECT_EQ(x->grad.to_vector<double>(), run(false, &full_runs));
}

// Within a budget the first block keeps its result and the second, past it, recomputes; the budget's bytes come back
// when the recompute takes them, or when a recorded block is dropped without a backward.
TEST(Autograd, SelectiveRecomputationKeepsWithinItsBudget) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor x0 = test::randn({3, 4}, seed), dy = test::randn({3, 4}, seed + 1);
  const auto budget = std::make_shared<ag::KeepBudget>(x0.nbytes());  // one block's result
  CountedBlock first, second;
  Var x = ag::leaf(x0);
  const Var h = ag::checkpoint("block 0", first.fn(), {x}, {true, budget})[0];
  const Var y = ag::checkpoint("block 1", second.fn(), {h}, {true, budget})[0];
  EXPECT_EQ(budget->held(), x0.nbytes());
  ag::backward(y, dy);
  EXPECT_EQ(first.computed, 1);   // kept
  EXPECT_EQ(second.computed, 2);  // past the budget: recomputed
  EXPECT_EQ(budget->held(), 0u);
  CountedBlock unkept_first, unkept_second;
  Var x2 = ag::leaf(x0);
  const Var h2 = ag::checkpoint("block 0", unkept_first.fn(), {x2}, false)[0];
  ag::backward(ag::checkpoint("block 1", unkept_second.fn(), {h2}, false)[0], dy);
  EXPECT_EQ(x->grad.to_vector<double>(), x2->grad.to_vector<double>());

  CountedBlock dropped;
  ag::checkpoint("block 2", dropped.fn(), {ag::leaf(x0)}, {true, budget});
  EXPECT_EQ(budget->held(), x0.nbytes());
  ag::current_tape().clear();  // no backward: the kept result is released with the node
  EXPECT_EQ(budget->held(), 0u);
}

// A recompute that does not ask for what the first forward kept (a block that is not deterministic) is refused,
// naming the block and the ops; attention and the Chebyshev solve are such kept ops.
TEST(Autograd, SelectiveRecomputationRefusesAnotherSequenceOfOps) {
  const Tensor x0 = test::randn({1, 3, 2, 4}, 1);
  for (const char* op : {"attention", "chebyshev_solve"}) {
    SCOPED_TRACE(op);
    int runs = 0;
    ag::BlockFn fn = [&](const std::vector<Var>& in) {
      if (runs++ > 0) return std::vector<Var>{ag::scale(in[0], 2.0)};  // the recompute skips the op
      if (std::string(op) == "attention") return std::vector<Var>{ag::attention(in[0], in[0], in[0], {})};
      return std::vector<Var>{ag::chebyshev_solve(in[0], in[0], nullptr, {}, nullptr, nullptr)};
    };
    Var x = ag::leaf(x0);
    const Var y = ag::checkpoint("block 7", fn, {x})[0];
    test::expect_error(
        [&] {
          ag::backward(y, test::randn({1, 3, 2, 4}, 2));
        },
        {"checkpoint 'block 7'", "took 0 of the 1 results"});
  }
  int runs = 0;
  ag::BlockFn swapped = [&](const std::vector<Var>& in) {
    const char* op = runs++ == 0 ? "first" : "second";
    ag::kept_across_recompute(op, [&] { return std::vector<Tensor>{in[0]->value}; });
    return std::vector<Var>{ag::scale(in[0], 2.0)};
  };
  Var x = ag::leaf(x0);
  const Var y = ag::checkpoint("block 3", swapped, {x})[0];
  test::expect_error(
      [&] {
        ag::backward(y, test::randn({1, 3, 2, 4}, 2));
      },
      {"checkpoint 'block 3'", "second's results", "first's"});
}

}  // namespace
}  // namespace primer

namespace primer {
namespace {

// Layout and dtype ops through the tape, checked by finite differences like every differentiable op.
TEST(Autograd, ReshapeTransposeAndCastGradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::GradCheck check;
  check.inputs = {test::randn({2, 3, 4}, seed)};
  check.names = {"x"};
  auto graph = [](const ag::Var& x) {
    ag::Var t = ag::transpose(x, 0, 2);  // [4, 3, 2]
    ag::Var r = ag::reshape(t, {6, 4});
    return ag::mul(r, ag::scale(r, 0.5));
  };
  check.forward = [&](const std::vector<Tensor>& in) {
    ag::NoGrad g;
    return std::vector<Tensor>{graph(ag::constant(in[0]))->value};
  };
  check.backward = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& gout) {
    ag::Var x = ag::leaf(in[0]);
    ag::backward(graph(x), gout[0]);
    return std::vector<Tensor>{x->grad};
  };
  test::run_gradcheck(check, seed + 1);
}

// A cast is the identity on values up to rounding, so its gradient is the incoming gradient cast back. (Finite
// differences through an f32 rounding step would measure the rounding, not the derivative.)
TEST(Autograd, CastPassesTheGradientBackInTheInputDtype) {
  const uint64_t seed = test::fresh_seed();
  ag::Var x = ag::leaf(test::randn({7}, seed), "x");
  const Tensor g = test::randn({7}, seed + 1, DType::F32);
  ag::backward(ag::cast(x, DType::F32), g);
  ASSERT_EQ(x->grad.dtype(), DType::F64);
  EXPECT_EQ(x->grad.to_vector<double>(), g.to(DType::F64).to_vector<double>());
}

// A cast whose output two paths use (GKA's f32 query, read by the solve and the readout's mix): the node sums them as
// it casts back, one rounding of the sum.
TEST(Autograd, CastSumsTheGradientsOfTwoUses) {
  const uint64_t seed = test::fresh_seed();
  ag::Var x = ag::leaf(test::randn({2, 9}, seed), "x");
  const ag::Var y = ag::cast(x, DType::F32);
  const Tensor half = Tensor::full({1}, 0.5, DType::F32);
  const Tensor g = test::randn({2, 9}, seed + 1, DType::F32);
  ag::backward(ag::add(y, ag::mul(y, ag::constant(half))), g);
  ASSERT_EQ(x->grad.dtype(), DType::F64);
  EXPECT_EQ(x->grad.to_vector<double>(), ops::add(g, ops::mul(g, half)).to(DType::F64).to_vector<double>());
}

}  // namespace
}  // namespace primer

namespace primer {
namespace {

// The fused norm + rotation node (Qwen3's q and k): gradients of x and of the norm's weight by finite differences.
TEST(Autograd, RmsNormRopeGradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor positions = test::rand_ints({2, 5}, seed + 2, 0, 4096);
  const Tensor inv_freq = ops::rope_inv_freq(8, 1e4);
  test::GradCheck check;
  check.inputs = {test::randn({2, 5, 3, 8}, seed), ops::add(test::randn({8}, seed + 1, DType::F64, Device::cpu(), 0.3),
                                                            Tensor::full({8}, 1.0, DType::F64))};
  check.names = {"x", "w"};
  auto graph = [&](const ag::Var& x, const ag::Var& w) { return ag::rmsnorm_rope(x, w, 1e-6, positions, inv_freq); };
  check.forward = [&](const std::vector<Tensor>& in) {
    ag::NoGrad g;
    return std::vector<Tensor>{graph(ag::constant(in[0]), ag::constant(in[1]))->value};
  };
  check.backward = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& gout) {
    ag::Var x = ag::leaf(in[0]), w = ag::leaf(in[1]);
    w->accumulates = true;
    ag::backward(graph(x, w), gout[0]);
    return std::vector<Tensor>{x->grad, w->grad};
  };
  test::run_gradcheck(check, seed + 3);
}

}  // namespace
}  // namespace primer
