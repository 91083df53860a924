// CPU elementwise ops: forward against direct formulas, f64 finite-difference gradients (broadcasting backward goes
// through sum_to_shape), and argument errors.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops/elementwise.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using ops::Unary;

// Central differences with step 1e-6 on O(1) values: truncation ~1e-12, cancellation ~1e-10 relative.
constexpr double kGradTol = 1e-6;

// Row-major index of `shape` for multi-index `idx`, broadcasting dims of size 1 (right-aligned).
int64_t broadcast_index(const Shape& shape, const std::vector<int64_t>& idx) {
  const size_t lead = idx.size() - shape.size();
  int64_t flat = 0;
  for (size_t i = 0; i < shape.size(); ++i) flat = flat * shape[i] + (shape[i] == 1 ? 0 : idx[lead + i]);
  return flat;
}

std::vector<int64_t> unravel(int64_t n, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    idx[size_t(i)] = n % shape[size_t(i)];
    n /= shape[size_t(i)];
  }
  return idx;
}

struct BroadcastCase {
  Shape a, b, out;
};
const std::vector<BroadcastCase> kBroadcastCases = {
    {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
    {{2, 3, 4}, {4}, {2, 3, 4}},
    {{2, 3, 4}, {3, 1}, {2, 3, 4}},
    {{1, 3, 1}, {2, 1, 5}, {2, 3, 5}},
    {{5}, {1}, {5}},
    {{2, 1, 3, 1}, {4, 3, 2}, {2, 4, 3, 2}},
};

TEST(Elementwise, BinaryBroadcastsLikeNumpy) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const auto& c : kBroadcastCases) {
    for (DType dt : {DType::F64, DType::F32}) {
      Tensor a = test::randn(c.a, seed, dt), b = test::randn(c.b, seed + 1, dt);
      const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
      const Tensor sum = ops::add(a, b), diff = ops::sub(a, b), prod = ops::mul(a, b);
      ASSERT_EQ(sum.shape(), c.out);
      EXPECT_EQ(sum.dtype(), dt);
      const auto s = sum.to_vector<double>(), d = diff.to_vector<double>(), p = prod.to_vector<double>();
      const double tol = dt == DType::F32 ? 1e-6 : 1e-15;  // one f32 rounding of O(1) values
      for (int64_t i = 0; i < shape_numel(c.out); ++i) {
        const auto idx = unravel(i, c.out);
        const double x = va[size_t(broadcast_index(c.a, idx))], y = vb[size_t(broadcast_index(c.b, idx))];
        EXPECT_NEAR(s[size_t(i)], x + y, tol);
        EXPECT_NEAR(d[size_t(i)], x - y, tol);
        EXPECT_NEAR(p[size_t(i)], x * y, tol);
      }
    }
  }
}

TEST(Elementwise, NonContiguousInputsAreRead) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Tensor a = test::randn({4, 3}, seed).transpose(0, 1);  // [3, 4] view
  Tensor b = test::randn({5, 4}, seed + 1).slice(0, 1, 4);
  test::expect_close(ops::mul(a, b), ops::mul(a.contiguous(), b.contiguous()), 0, 0, "mul of views");
  test::expect_close(ops::unary(Unary::Silu, a), ops::unary(Unary::Silu, a.contiguous()), 0, 0, "silu of a view");
}

TEST(Elementwise, ScaleAndAccumulate) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Tensor x = test::randn({3, 7}, seed), acc = test::randn({3, 7}, seed + 1);
  const auto vx = x.to_vector<double>(), v0 = acc.to_vector<double>();
  const auto sx = ops::scale(x, -2.5).to_vector<double>();
  ops::add_(acc, x, 0.5);
  ops::add_(acc, x);
  const auto v1 = acc.to_vector<double>();
  for (size_t i = 0; i < vx.size(); ++i) {
    EXPECT_DOUBLE_EQ(sx[i], -2.5 * vx[i]);
    EXPECT_NEAR(v1[i], v0[i] + 1.5 * vx[i], 1e-15);
  }
}

double reference_unary(Unary op, double x) {
  switch (op) {
    case Unary::Silu: return x / (1 + std::exp(-x));
    case Unary::Sigmoid: return 1 / (1 + std::exp(-x));
    case Unary::Softplus: return std::log(1 + std::exp(x));
    case Unary::Exp: return std::exp(x);
    case Unary::Square: return x * x;
  }
  return 0;
}
const Unary kUnaryOps[] = {Unary::Silu, Unary::Sigmoid, Unary::Softplus, Unary::Exp, Unary::Square};

TEST(Elementwise, UnaryMatchesFormulas) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Tensor x = test::randn({5, 9}, seed, DType::F64, Device::cpu(), 3.0);
  const auto vx = x.to_vector<double>();
  for (Unary op : kUnaryOps) {
    const auto y = ops::unary(op, x).to_vector<double>();
    for (size_t i = 0; i < vx.size(); ++i) EXPECT_NEAR(y[i], reference_unary(op, vx[i]), 1e-12 * (1 + std::abs(y[i])));
  }
  // Softplus stays finite and exact where exp(x) overflows.
  const auto big = ops::unary(Unary::Softplus, Tensor::from_vector(std::vector<double>{800, -800}, {2}, DType::F64));
  EXPECT_EQ(big.to_vector<double>(), (std::vector<double>{800, 0}));
}

// add/sub/mul gradients: the output gradient summed back to each input's (broadcast) shape.
std::vector<Tensor> binary_backward(ops::Binary op, const std::vector<Tensor>& in, const Tensor& g) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  switch (op) {
    case ops::Binary::Add: return {ops::sum_to_shape(g, a.shape()), ops::sum_to_shape(g, b.shape())};
    case ops::Binary::Sub: return {ops::sum_to_shape(g, a.shape()), ops::scale(ops::sum_to_shape(g, b.shape()), -1)};
    case ops::Binary::Mul:
      return {ops::sum_to_shape(ops::mul(g, b), a.shape()), ops::sum_to_shape(ops::mul(g, a), b.shape())};
  }
  return {};
}

TEST(Elementwise, BinaryGradientsWithBroadcasting) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (ops::Binary op : {ops::Binary::Add, ops::Binary::Sub, ops::Binary::Mul}) {
    for (const auto& c : kBroadcastCases) {
      test::GradCheck check;
      check.inputs = {test::randn(c.a, seed), test::randn(c.b, seed + 1)};
      check.names = {"a", "b"};
      check.forward = [op](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{op == ops::Binary::Add   ? ops::add(in[0], in[1])
                                   : op == ops::Binary::Sub ? ops::sub(in[0], in[1])
                                                            : ops::mul(in[0], in[1])};
      };
      check.backward = [op](const std::vector<Tensor>& in, const std::vector<Tensor>& g) {
        return binary_backward(op, in, g[0]);
      };
      check.tolerance = kGradTol;
      SCOPED_TRACE("op " + std::to_string(int(op)) + " a " + shape_str(c.a) + " b " + shape_str(c.b));
      test::run_gradcheck(check, seed);
    }
  }
}

TEST(Elementwise, ScaleAndUnaryGradients) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::GradCheck scale;
  scale.inputs = {test::randn({3, 5}, seed)};
  scale.forward = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::scale(in[0], 0.75)}; };
  scale.backward = [](const std::vector<Tensor>&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{ops::scale(g[0], 0.75)};
  };
  scale.tolerance = kGradTol;
  test::run_gradcheck(scale, seed);
  for (Unary op : kUnaryOps) {
    SCOPED_TRACE("unary " + std::to_string(int(op)));
    test::GradCheck check;
    check.inputs = {test::randn({4, 6}, seed + 2, DType::F64, Device::cpu(), 2.0)};
    check.forward = [op](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::unary(op, in[0])}; };
    check.backward = [op](const std::vector<Tensor>& in, const std::vector<Tensor>& g) {
      return std::vector<Tensor>{ops::unary_backward(op, in[0], g[0])};
    };
    check.tolerance = kGradTol;
    test::run_gradcheck(check, seed);
  }
}

TEST(Elementwise, SumToShapeSumsBroadcastDims) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Tensor g = test::randn({2, 3, 4}, seed);
  const auto vg = g.to_vector<double>();
  const auto r = ops::sum_to_shape(g, {3, 1}).to_vector<double>();
  ASSERT_EQ(r.size(), 3u);
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) s += vg[size_t((i * 3 + j) * 4 + k)];
    EXPECT_NEAR(r[size_t(j)], s, 1e-13);
  }
  Tensor same = ops::sum_to_shape(g, g.shape());
  EXPECT_NE(same.data_ptr(), g.data_ptr()) << "a fresh tensor even when nothing is summed";
  test::expect_close(same, g, 0, 0, "identity sum_to_shape");
  EXPECT_EQ(ops::sum_to_shape(g, {}).shape(), Shape{});
  EXPECT_NEAR(
      ops::sum_to_shape(g, {1}).item(),
      [&] {
        double s = 0;
        for (double v : vg) s += v;
        return s;
      }(),
      1e-12);
}

using test::expect_error;

TEST(Elementwise, BadArgumentsNameTheArgument) {
  Tensor a = Tensor::zeros({2, 3}, DType::F32);
  expect_error([&] { ops::add(a, Tensor::zeros({4}, DType::F32)); }, {"add", "'b'", "[4]", "broadcast"});
  expect_error([&] { ops::mul(a, Tensor::zeros({2, 3}, DType::F64)); }, {"mul", "'b'", "f64", "expected dtype f32"});
  expect_error([&] { ops::unary(Unary::Exp, Tensor::zeros({2}, DType::BF16)); }, {"unary", "'x'", "bf16", "f32/f64"});
  expect_error(
      [&] {
        ops::unary_backward(Unary::Silu, a, Tensor::zeros({3, 2}, DType::F32));
      },
      {"unary_backward", "'dy'", "expected shape [2, 3]"});
  expect_error([&] { ops::add_(a, Tensor::zeros({3}, DType::F32)); }, {"add_", "'src'", "expected shape"});
  expect_error(
      [&] {
        ops::add_(a.transpose(0, 1), Tensor::zeros({3, 2}, DType::F32));
      },
      {"add_", "'dst'", "contiguous"});
  expect_error([&] { ops::sum_to_shape(a, {4}); }, {"sum_to_shape", "[4]", "broadcast"});
}

}  // namespace
}  // namespace primer
