// CPU reductions and softmax: forward against direct formulas, f64 finite-difference gradients, argument errors.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/ops/softmax.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

constexpr double kGradTol = 1e-6;  // central differences, step 1e-6, O(1) values

TEST(Reduce, SumAndMeanOverEveryDim) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Shape shape{3, 4, 5};
  Tensor x = test::randn(shape, seed);
  const auto v = x.to_vector<double>();
  for (int dim = 0; dim < 3; ++dim) {
    const auto s = ops::sum(x, dim).to_vector<double>(), m = ops::mean(x, dim - 3, true).to_vector<double>();
    Shape out = shape;
    out.erase(out.begin() + dim);
    EXPECT_EQ(ops::sum(x, dim).shape(), out);
    Shape kept = shape;
    kept[size_t(dim)] = 1;
    EXPECT_EQ(ops::mean(x, dim, true).shape(), kept);
    std::vector<double> expect(size_t(shape_numel(out)), 0.0);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 5; ++k) {
          const int idx[3] = {i, j, k};
          int64_t o = 0;
          for (int d = 0; d < 3; ++d)
            if (d != dim) o = o * shape[size_t(d)] + idx[d];
          expect[size_t(o)] += v[size_t((i * 4 + j) * 5 + k)];
        }
    for (size_t i = 0; i < expect.size(); ++i) {
      EXPECT_NEAR(s[i], expect[i], 1e-13);
      EXPECT_NEAR(m[i], expect[i] / double(shape[size_t(dim)]), 1e-13);
    }
  }
  // A transposed view is reduced by its logical layout.
  test::expect_close(ops::sum(x.transpose(0, 2), 1), ops::sum(x, 1).transpose(0, 1), 1e-15, 1e-14, "sum of a view");
}

TEST(Reduce, WholeTensorSums) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType dt : {DType::F64, DType::F32}) {
    Tensor x = test::randn({7, 13}, seed, dt);
    double s = 0, ss = 0;
    for (double v : x.to_vector<double>()) {
      s += v;
      ss += v * v;
    }
    const Tensor a = ops::sum_all(x), b = ops::sumsq_all(x.transpose(0, 1));
    EXPECT_EQ(a.shape(), Shape{1});
    EXPECT_EQ(a.dtype(), dt);
    const double tol = dt == DType::F32 ? 1e-5 : 1e-12;  // f32: one rounding of the f64 accumulator
    EXPECT_NEAR(a.item(), s, tol * (1 + std::abs(s)));
    EXPECT_NEAR(b.item(), ss, tol * ss);
  }
}

TEST(Reduce, Gradients) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Shape shape{3, 4, 5};
  for (bool average : {false, true}) {
    for (int dim : {0, 1, -1}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + (average ? " mean" : " sum"));
      test::GradCheck check;
      check.inputs = {test::randn(shape, seed)};
      check.forward = [=](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{average ? ops::mean(in[0], dim) : ops::sum(in[0], dim)};
      };
      // dx = dy broadcast back over the reduced dim (/ its size for the mean).
      check.backward = [=](const std::vector<Tensor>& in, const std::vector<Tensor>& g) {
        const double k = average ? 1.0 / double(in[0].size(dim)) : 1.0;
        const Tensor spread =
            ops::add(Tensor::zeros(in[0].shape(), DType::F64), g[0].unsqueeze(dim < 0 ? dim + 3 : dim));
        return std::vector<Tensor>{ops::scale(spread, k)};
      };
      check.tolerance = kGradTol;
      test::run_gradcheck(check, seed);
    }
  }
}

TEST(Softmax, MatchesFormulaAndIsStable) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Tensor x = test::randn({4, 1, 11}, seed, DType::F64, Device::cpu(), 3.0);
  const auto v = x.to_vector<double>(), y = ops::softmax(x).to_vector<double>();
  for (int r = 0; r < 4; ++r) {
    double z = 0;
    for (int c = 0; c < 11; ++c) z += std::exp(v[size_t(r * 11 + c)]);
    for (int c = 0; c < 11; ++c) EXPECT_NEAR(y[size_t(r * 11 + c)], std::exp(v[size_t(r * 11 + c)]) / z, 1e-15);
  }
  // Large logits: no overflow, shift invariance.
  const auto big = ops::softmax(Tensor::from_vector(std::vector<double>{1000, 1001, 999}, {1, 3}, DType::F64));
  const auto small = ops::softmax(Tensor::from_vector(std::vector<double>{0, 1, -1}, {1, 3}, DType::F64));
  test::expect_close(big, small, 1e-15, 1e-15, "softmax shift invariance");
}

TEST(Softmax, Gradient) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::GradCheck check;
  check.inputs = {test::randn({3, 2, 7}, seed, DType::F64, Device::cpu(), 2.0)};
  check.forward = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::softmax(in[0])}; };
  check.backward = [](const std::vector<Tensor>& in, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{ops::softmax_backward(ops::softmax(in[0]), g[0])};
  };
  check.tolerance = kGradTol;
  test::run_gradcheck(check, seed);
}

using test::expect_error;

TEST(ReduceSoftmax, BadArgumentsNameTheArgument) {
  Tensor x = Tensor::zeros({2, 3}, DType::F32);
  expect_error([&] { ops::sum(x, 2); }, {"sum", "dim 2", "'x'", "f32[2, 3]"});
  expect_error([&] { ops::sum_all(Tensor::zeros({2}, DType::I32)); }, {"sum_all", "'x'", "i32", "f32/f64"});
  expect_error([&] { ops::softmax(Tensor::zeros({2}, DType::BF16)); }, {"softmax", "'x'", "bf16"});
  expect_error(
      [&] {
        ops::softmax_backward(x, Tensor::zeros({2, 3}, DType::F64));
      },
      {"softmax_backward", "'dy'", "f64"});
  expect_error([&] { ops::softmax_backward(x, Tensor::zeros({3, 2}, DType::F32)); }, {"'dy'", "expected shape [2, 3]"});
}

}  // namespace
}  // namespace primer
