// The finite-difference checker itself: a gradient a few parts per million wrong fails it, a correct gradient
// through a sharply curved spot (where the first step's five-point stencil errs by truncation) passes it, and where
// rounding of the objective limits the differences' resolution, a correct gradient passes and a wrong one fails.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/test_util.h"

namespace primer {
namespace {

using ScalarFunction = double (*)(double);

// A check of y = f(x) elementwise, with `derivative` as the claimed gradient.
test::GradCheck elementwise_check(const std::vector<double>& x, ScalarFunction f, ScalarFunction derivative) {
  test::GradCheck check;
  const Shape shape{int64_t(x.size())};
  check.inputs.push_back(Tensor::from_vector(x, shape, DType::F64));
  check.names.push_back("x");
  check.forward = [=](const std::vector<Tensor>& in) {
    std::vector<double> y = in[0].to_vector<double>();
    for (double& v : y) v = f(v);
    return std::vector<Tensor>{Tensor::from_vector(y, shape, DType::F64)};
  };
  check.backward = [=](const std::vector<Tensor>& in, const std::vector<Tensor>& gout) {
    std::vector<double> g = in[0].to_vector<double>();
    const std::vector<double> w = gout[0].to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) g[i] = w[i] * derivative(g[i]);
    return std::vector<Tensor>{Tensor::from_vector(g, shape, DType::F64)};
  };
  return check;
}

// x / sqrt(x² + a²): a scalar RMSNorm, whose derivatives near 0 grow as 1/aⁿ. With a = 3e-4 the five-point stencil
// at h = 1e-5 errs by 1.5 (h/a)⁴ ≈ 2e-6 relative at x = 0 (over the tolerance), at h/3 by 81 times less.
constexpr double kCurve = 3e-4;
double scalar_norm(double x) { return x / std::sqrt(x * x + kCurve * kCurve); }
double scalar_norm_derivative(double x) { return kCurve * kCurve / std::pow(x * x + kCurve * kCurve, 1.5); }

double sine(double x) { return std::sin(x); }
double slightly_wrong_cosine(double x) { return std::cos(x) * (1 + 3e-6); }

// A small slope on a large value: rounding of f (~1e-11 absolute) divided by h puts the differences' own error near
// 1e-5 of this gradient (over the tolerance), as a whole model's loss can against one weight's small gradient.
double offset_sine(double x) { return 1e5 + 1e-2 * std::sin(x); }
double offset_sine_derivative(double x) { return 1e-2 * std::cos(x); }
double offset_sine_wrong_derivative(double x) { return 1e-2 * std::cos(x) * (1 + 1e-2); }

TEST(GradCheck, AGradientThreePartsPerMillionWrongFails) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const test::GradCheck check = elementwise_check({0.3, -1.2, 2.0, 0.7}, sine, slightly_wrong_cosine);
  EXPECT_NONFATAL_FAILURE(test::run_gradcheck(check, seed), "gradient of x: relative error");
}

TEST(GradCheck, ACorrectGradientThroughASharpCurvePasses) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::run_gradcheck(elementwise_check({0.0}, scalar_norm, scalar_norm_derivative), seed);
}

TEST(GradCheck, ACorrectGradientAtTheDifferencesResolutionPasses) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::run_gradcheck(elementwise_check({0.4, -0.9}, offset_sine, offset_sine_derivative), seed);
}

// A seed on which the h and h/3 stencils were 8e-5 off the correct gradient but only 3.5e-5 apart: their
// disagreement did not bound the rounding error, the stencil's rounding floor does.
TEST(GradCheck, ACorrectGradientWhoseStencilsRoundAlikePasses) {
  test::run_gradcheck(elementwise_check({0.4, -0.9}, offset_sine, offset_sine_derivative), 5730482489620909470ull);
}

TEST(GradCheck, AWrongGradientAtTheDifferencesResolutionFails) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const test::GradCheck check = elementwise_check({0.4, -0.9}, offset_sine, offset_sine_wrong_derivative);
  EXPECT_NONFATAL_FAILURE(test::run_gradcheck(check, seed), "gradient of x: relative error");
}

}  // namespace
}  // namespace primer
