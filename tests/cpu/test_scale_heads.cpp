// ops::scale_heads (Mamba-2's Δ·x and y + D·x with grouped heads, GKA's mix): the forward against the unfused
// composition (head repetition, broadcast product, sum or mix) in f64, finite-difference gradients of x, s and base
// for a per-row and a per-head s, and argument errors.
#include <gtest/gtest.h>

#include <string>

#include "core/autograd/functions.h"
#include "core/ops/elementwise.h"
#include "core/ops/scale_heads.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using test::expect_error;

// Rows [2, 3], 2 heads of x in groups of 3 (6 output heads), odd head_dim.
constexpr int64_t kB = 2, kT = 3, kHx = 2, kGroups = 3, kH = kHx * kGroups, kD = 5;

Tensor scales(bool per_row, uint64_t seed) {
  return per_row ? test::randn({kB, kT, kH}, seed) : test::randn({kH}, seed);
}

TEST(ScaleHeads, EqualsRepeatedHeadsTimesTheScalePlusTheBase) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor x = test::randn({kB, kT, kHx, kD}, seed), base = test::randn({kB, kT, kH, kD}, seed + 1);
  for (const bool per_row : {true, false}) {
    SCOPED_TRACE(per_row ? "s per row and head" : "s per head");
    const Tensor s = scales(per_row, seed + 2);
    const Tensor repeated = ag::repeat_interleave(ag::constant(x), 2, kGroups)->value;
    const Tensor product = ops::mul(repeated, per_row ? s.view({kB, kT, kH, 1}) : s.view({kH, 1}));
    test::expect_close(ops::scale_heads(x, s, Tensor(), kH), product, 1e-15, 1e-14, "without base");
    test::expect_close(ops::scale_heads(x, s, base, kH), ops::add(product, base), 1e-15, 1e-14, "with base");
  }
}

TEST(ScaleHeads, GradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const bool per_row : {true, false}) {
    SCOPED_TRACE(per_row ? "s per row and head" : "s per head");
    test::GradCheck check;
    check.inputs = {test::randn({kB, kT, kHx, kD}, seed), scales(per_row, seed + 1),
                    test::randn({kB, kT, kH, kD}, seed + 2)};
    check.names = {"x", "s", "base"};
    check.forward = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::scale_heads(in[0], in[1], in[2], kH)};
    };
    check.backward = [](const std::vector<Tensor>& in, const std::vector<Tensor>& gout) {
      const ops::ScaleHeadsGrads g = ops::scale_heads_backward(gout[0], in[0], in[1]);
      return std::vector<Tensor>{g.dx, g.ds, gout[0]};
    };
    test::run_gradcheck(check, seed + 3);
  }
}

// The autograd node: gradients of x, s and base through a loss, against the op's backward.
TEST(ScaleHeads, AutogradNodeRoutesEachGradient) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ag::Var x = ag::leaf(test::randn({kB, kT, kHx, kD}, seed), "x");
  const ag::Var s = ag::leaf(scales(true, seed + 1), "s");
  const ag::Var base = ag::leaf(test::randn({kB, kT, kH, kD}, seed + 2), "base");
  const Tensor dy = test::randn({kB, kT, kH, kD}, seed + 3);
  ag::backward(ag::scale_heads(x, s, base, kH), dy);
  const ops::ScaleHeadsGrads g = ops::scale_heads_backward(dy, x->value, s->value);
  test::expect_close(x->grad, g.dx, 0, 0, "dx");
  test::expect_close(s->grad, g.ds, 0, 0, "ds");
  test::expect_close(base->grad, dy, 0, 0, "dbase");
}

// x used twice (Mamba-2's value and skip): the second backward sums the first's gradient in its own pass.
TEST(ScaleHeads, ASecondUseAddsItsGradientInThePass) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor xv = test::randn({kB, kT, kHx, kD}, seed), dy = test::randn({kB, kT, kH, kD}, seed + 3),
               dv = test::randn({kB, kT, kH, kD}, seed + 4);
  const Tensor s_row = scales(true, seed + 1), s_head = scales(false, seed + 2);
  const ag::Var x = ag::leaf(xv, "x");
  const ag::Var v = ag::scale_heads(x, ag::constant(s_row), nullptr, kH);
  const ag::Var y = ag::scale_heads(x, ag::constant(s_head), v, kH);
  ag::backward(y, dy);
  const Tensor first = ops::scale_heads_backward(dy, xv, s_head).dx;
  const Tensor second = ops::scale_heads_backward(dy, xv, s_row).dx;  // v passes dy on
  test::expect_close(x->grad, ops::add(first, second), 1e-15, 1e-14, "dx of both uses");
  test::expect_close(ops::scale_heads_backward(dv, xv, s_row, first).dx,
                     ops::add(first, ops::scale_heads_backward(dv, xv, s_row).dx), 1e-15, 1e-14, "dx with an addend");
}

// The output used by two or three consumers (GKA's β·k by the solve and the readout): the node adds the later paths'
// gradients as it reads dout (ops::scale_heads_backward's dout_part), which equals the backward of their sum.
TEST(ScaleHeads, AnOutputUsedTwiceSumsItsGradientsInThePass) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor xv = test::randn({kB, kT, kHx, kD}, seed), sv = scales(true, seed + 1);
  const Tensor basev = test::randn({kB, kT, kH, kD}, seed + 2), dy = test::randn({kB, kT, kH, kD}, seed + 3);
  for (const bool lerp : {false, true})
    for (const int uses : {2, 3}) {
      SCOPED_TRACE(std::string(lerp ? "lerp, " : "") + std::to_string(uses) + " uses");
      const ag::Var x = ag::leaf(xv, "x"), s = ag::leaf(sv, "s"), base = ag::leaf(basev, "base");
      const ag::Var y = ag::scale_heads(x, s, base, kH, {.base = lerp ? ops::HeadBase::Lerp : ops::HeadBase::Add});
      ag::Var sum = ag::add(y, y);
      if (uses == 3) sum = ag::add(sum, ag::mul(y, ag::constant(Tensor::full({1}, 0.5, DType::F64))));
      ag::backward(sum, dy);
      // Each use's gradient: dy per add operand, 0.5·dy through the product.
      const Tensor total = ops::scale(dy, uses == 3 ? 2.5 : 2.0);
      const ops::ScaleHeadsGrads g = ops::scale_heads_backward(total, xv, sv, Tensor(), lerp ? basev : Tensor());
      test::expect_close(x->grad, g.dx, 1e-15, 1e-14, "dx");
      test::expect_close(s->grad, g.ds, 1e-15, 1e-14, "ds");
      test::expect_close(base->grad, lerp ? g.dbase : total, 1e-15, 1e-14, "dbase");
    }
  // The op's second gradient, against the backward of the sum.
  const Tensor part = test::randn({kB, kT, kH, kD}, seed + 4);
  const ops::ScaleHeadsGrads with_part = ops::scale_heads_backward(dy, xv, sv, Tensor(), basev, part);
  const ops::ScaleHeadsGrads of_sum = ops::scale_heads_backward(ops::add(dy, part), xv, sv, Tensor(), basev);
  test::expect_close(with_part.dx, of_sum.dx, 1e-15, 1e-14, "dx with dout_part");
  test::expect_close(with_part.ds, of_sum.ds, 1e-15, 1e-14, "ds with dout_part");
  test::expect_close(with_part.dbase, of_sum.dbase, 1e-15, 1e-14, "dbase with dout_part");
}

// GKA's q̃ = (1 − α) q + α x̂: HeadBase::Lerp against (1 − s)·base + s·(x's heads), and its gradients (dbase from
// the op) by finite differences, grouped heads included.
TEST(ScaleHeads, LerpMixesTheBaseAndTheScaledHeads) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ops::ScaleHeadsOptions lerp{.base = ops::HeadBase::Lerp};
  const Tensor x = test::randn({kB, kT, kHx, kD}, seed), base = test::randn({kB, kT, kH, kD}, seed + 1);
  for (const bool per_row : {true, false}) {
    SCOPED_TRACE(per_row ? "s per row and head" : "s per head");
    const Tensor s = scales(per_row, seed + 2);
    const Tensor s_b = per_row ? s.view({kB, kT, kH, 1}) : s.view({kH, 1});
    const Tensor repeated = ag::repeat_interleave(ag::constant(x), 2, kGroups)->value;
    const Tensor one_minus_s =
        ops::add(ops::mul(s_b, Tensor::full({1}, -1.0, DType::F64)), Tensor::full({1}, 1.0, DType::F64));
    test::expect_close(ops::scale_heads(x, s, base, kH, lerp),
                       ops::add(ops::mul(repeated, s_b), ops::mul(base, one_minus_s)), 1e-15, 1e-14, "lerp");

    test::GradCheck check;
    check.inputs = {x, s, base};
    check.names = {"x", "s", "base"};
    check.forward = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::scale_heads(in[0], in[1], in[2], kH, lerp)};
    };
    check.backward = [](const std::vector<Tensor>& in, const std::vector<Tensor>& gout) {
      const ops::ScaleHeadsGrads g = ops::scale_heads_backward(gout[0], in[0], in[1], Tensor(), in[2]);
      return std::vector<Tensor>{g.dx, g.ds, g.dbase};
    };
    test::run_gradcheck(check, seed + 3);
  }
  // The autograd node routes dbase from the op.
  const ag::Var xv = ag::leaf(x, "x"), sv = ag::leaf(scales(true, seed + 2), "s"), bv = ag::leaf(base, "base");
  const Tensor dy = test::randn({kB, kT, kH, kD}, seed + 4);
  ag::backward(ag::scale_heads(xv, sv, bv, kH, lerp), dy);
  const ops::ScaleHeadsGrads g = ops::scale_heads_backward(dy, x, sv->value, Tensor(), base);
  test::expect_close(xv->grad, g.dx, 0, 0, "dx");
  test::expect_close(sv->grad, g.ds, 0, 0, "ds");
  test::expect_close(bv->grad, g.dbase, 0, 0, "dbase");
}

TEST(ScaleHeads, RefusesMismatchedArguments) {
  const Tensor x = test::randn({kB, kT, kHx, kD}, 1);
  expect_error([&] { ops::scale_heads(x, test::randn({5}, 2), Tensor(), 5); }, {"scale_heads", "multiple", "2 heads"});
  expect_error(
      [&] {
        ops::scale_heads(x, test::randn({kB, kH}, 2), Tensor(), kH);
      },
      {"scale_heads", "s is", "per head [6]"});
  expect_error([&] { ops::scale_heads(x, test::randn({kH}, 2, DType::F32), Tensor(), kH); }, {"scale_heads", "s"});
  expect_error(
      [&] {
        ops::scale_heads(x, test::randn({kH}, 2), test::randn({kB, kT, kHx, kD}, 3), kH);
      },
      {"scale_heads", "base"});
  expect_error(
      [&] {
        ops::scale_heads_backward(test::randn({kB, kT, kH, kD - 1}, 3), x, test::randn({kH}, 2));
      },
      {"scale_heads_backward", "dout"});
  expect_error([&] { ops::scale_heads(x, test::randn({kH}, 2), Tensor(), kH, {.base = ops::HeadBase::Lerp}); },
               {"scale_heads", "Lerp", "needs a base"});
  // Another output dtype only from bf16 to f32 on CUDA.
  expect_error([&] { ops::scale_heads(x, test::randn({kH}, 2), Tensor(), kH, {.out_dtype = DType::F32}); },
               {"scale_heads", "output dtype is f32", "expected x's dtype"});
  expect_error(
      [&] {
        ops::scale_heads_backward(test::randn({kB, kT, kH, kD}, 3), x, test::randn({kH}, 2), Tensor(),
                                  test::randn({kB, kT, kH, kD - 1}, 4));
      },
      {"scale_heads_backward", "lerp_base"});
}

}  // namespace
}  // namespace primer
