#include <gtest/gtest.h>

#include <cmath>

#include "core/ops/cross_entropy.h"
#include "core/ops/gemm.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

// Direct triple loop in f64: C = alpha * op(A) op(B) + beta * C0 for 2-D or batched 3-D tensors.
Tensor reference_gemm(const Tensor& A, bool ta, const Tensor& B, bool tb, const Tensor& C0, double alpha, double beta) {
  const bool batched = A.dim() == 3;
  const int64_t batch = batched ? A.size(0) : 1;
  const int64_t m = ta ? A.size(-1) : A.size(-2), k = ta ? A.size(-2) : A.size(-1), n = tb ? B.size(-2) : B.size(-1);
  const auto a = A.to_vector<double>(), b = B.to_vector<double>(), c0 = C0.to_vector<double>();
  std::vector<double> c(c0.size());
  for (int64_t q = 0; q < batch; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s +=
              a[size_t(q * m * k + (ta ? p * m + i : i * k + p))] * b[size_t(q * k * n + (tb ? j * k + p : p * n + j))];
        const size_t o = size_t(q * m * n + i * n + j);
        c[o] = alpha * s + (beta == 0 ? 0 : beta * c0[o]);
      }
  return Tensor::from_vector(c, C0.shape(), DType::F64);
}

Shape with_batch(int64_t batch, Shape s) {
  if (batch) s.insert(s.begin(), batch);
  return s;
}

TEST(Gemm, MatchesDirectFormulaForEveryTransposeAndBatch) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 37, n = 29, k = 41;
  for (DType dt : {DType::F32, DType::F64})
    for (int64_t batch : {0, 3})
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        SCOPED_TRACE(fmt::format("{} batch {} trans_a {} trans_b {}", dtype_name(dt), batch, ta, tb));
        const Tensor A = test::randn(with_batch(batch, ta ? Shape{k, m} : Shape{m, k}), seed + t, dt);
        const Tensor B = test::randn(with_batch(batch, tb ? Shape{n, k} : Shape{k, n}), seed + 10 + t, dt);
        const Tensor C = test::randn(with_batch(batch, {m, n}), seed + 20 + t, dt);
        const Tensor expected = reference_gemm(A, ta, B, tb, C, 0.75, 0.5);
        ops::gemm(A, ta, B, tb, C, 0.75, 0.5);
        // f32: k = 41 products of unit normals accumulated in f32 -> ~1e-7 relative; f64 is exact to ~1e-15.
        const double tol = dt == DType::F32 ? 1e-5 : 1e-12;
        test::expect_close(C, expected, tol, 50 * tol, "beta 0.5");
        test::poison(C);  // beta = 0 must not read C
        ops::gemm(A, ta, B, tb, C);
        test::expect_close(C, reference_gemm(A, ta, B, tb, C, 1.0, 0.0), tol, 50 * tol, "beta 0");
      }
}

TEST(Gemm, AcceptsStridedViewsAndMatmulAllocates) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor big = test::randn({9, 20}, seed);
  const Tensor A = big.slice(1, 3, 14);                             // [9, 11], row stride 20: passed as a leading dim
  const Tensor B = test::randn({7, 11}, seed + 1).transpose(0, 1);  // [11, 7] with a strided last dim: copied
  const Tensor C = ops::matmul(A, B);
  EXPECT_EQ(C.shape(), (Shape{9, 7}));
  test::expect_close(C, reference_gemm(A.contiguous(), false, B.contiguous(), false, C, 1, 0), 1e-12, 1e-12, "views");
}

// Gradients of out = alpha op(A) op(B) + beta C0, each written as a gemm with the matching transposes.
std::vector<Tensor> gemm_backward(const Tensor& A, bool ta, const Tensor& B, bool tb, const Tensor& dC, double alpha,
                                  double beta) {
  Tensor dA = Tensor::empty(A.shape(), DType::F64), dB = Tensor::empty(B.shape(), DType::F64);
  if (ta)
    ops::gemm(B, tb, dC, true, dA, alpha);  // dA = alpha op(B) dC^T
  else
    ops::gemm(dC, false, B, !tb, dA, alpha);  // dA = alpha dC op(B)^T
  if (tb)
    ops::gemm(dC, true, A, ta, dB, alpha);  // dB = alpha dC^T op(A)
  else
    ops::gemm(A, !ta, dC, false, dB, alpha);  // dB = alpha op(A)^T dC
  std::vector<double> dc0 = dC.to_vector<double>();
  for (double& v : dc0) v *= beta;
  return {dA, dB, Tensor::from_vector(dc0, dC.shape(), DType::F64)};
}

TEST(Gemm, GradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 4, n = 5, k = 3;
  const double alpha = 1.25, beta = 0.5;
  for (int64_t batch : {0, 2})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      SCOPED_TRACE(fmt::format("batch {} trans_a {} trans_b {}", batch, ta, tb));
      test::GradCheck c;
      c.inputs = {test::randn(with_batch(batch, ta ? Shape{k, m} : Shape{m, k}), seed + t),
                  test::randn(with_batch(batch, tb ? Shape{n, k} : Shape{k, n}), seed + 10 + t),
                  test::randn(with_batch(batch, {m, n}), seed + 20 + t)};
      c.names = {"A", "B", "C0"};
      c.forward = [&](const std::vector<Tensor>& in) {
        Tensor out = in[2].clone();
        ops::gemm(in[0], ta, in[1], tb, out, alpha, beta);
        return std::vector<Tensor>{out};
      };
      c.backward = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
        return gemm_backward(in[0], ta, in[1], tb, dout[0], alpha, beta);
      };
      test::run_gradcheck(c, seed + 100 + t);
    }
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::GradCheck c;
  c.inputs = {test::randn({2, 3, 5}, seed), test::randn({4, 5}, seed + 1)};
  c.names = {"x", "W"};
  c.forward = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::linear(in[0], in[1])}; };
  c.backward = [](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
    Tensor dx;
    const Tensor dW = test::randn(in[1].shape(), 7);  // accumulation: the check subtracts the starting value
    const Tensor dW0 = dW.clone();
    ops::linear_backward(dout[0], in[0], in[1], &dx, dW);
    auto acc = dW.to_vector<double>();
    const auto start = dW0.to_vector<double>();
    for (size_t i = 0; i < acc.size(); ++i) acc[i] -= start[i];
    return std::vector<Tensor>{dx, Tensor::from_vector(acc, dW.shape(), DType::F64)};
  };
  test::run_gradcheck(c, seed + 2);
}

// Targets in [0, V) with every third row ignored.
Tensor targets_with_ignored(int64_t n, int64_t vocab, uint64_t seed, int64_t ignore_index) {
  auto t = test::rand_ints({n}, seed, 0, vocab).to_vector<int32_t>();
  for (size_t i = 1; i < t.size(); i += 3) t[i] = int32_t(ignore_index);
  return Tensor::from_vector(t, {n}, DType::I32);
}

TEST(FusedCrossEntropy, LossMatchesLogSoftmax) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t n = 10, d = 6, vocab = 13, ignore = -100;
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor x = test::randn({n, d}, seed, dt), W = test::randn({vocab, d}, seed + 1, dt);
    const Tensor targets = targets_with_ignored(n, vocab, seed + 2, ignore);
    const auto logits =
        reference_gemm(x, false, W, true, Tensor::zeros({n, vocab}, DType::F64), 1, 0).to_vector<double>();
    const auto t = targets.to_vector<int32_t>();
    double expected = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (t[size_t(i)] == ignore) continue;
      double z = 0;
      for (int64_t j = 0; j < vocab; ++j) z += std::exp(logits[size_t(i * vocab + j)]);
      expected -= logits[size_t(i * vocab + t[size_t(i)])] - std::log(z);
    }
    const Tensor loss = ops::fused_linear_cross_entropy(x, W, targets, ignore, 1.0, nullptr, Tensor(), 4);
    EXPECT_EQ(loss.dtype(), dt);
    EXPECT_EQ(loss.shape(), (Shape{1}));
    // f32: logsumexp of 13 values and a 7-term sum, each ~1e-7 relative.
    EXPECT_NEAR(loss.item(), expected, (dt == DType::F32 ? 1e-5 : 1e-12) * std::abs(expected)) << dtype_name(dt);
  }
}

TEST(FusedCrossEntropy, GradientsMatchFiniteDifferencesAcrossChunks) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t n = 7, d = 5, vocab = 11, ignore = -1;
  const Tensor targets = targets_with_ignored(n, vocab, seed + 2, ignore);
  test::GradCheck c;
  c.inputs = {test::randn({n, d}, seed), test::randn({vocab, d}, seed + 1)};
  c.names = {"x", "W"};
  // chunk_tokens = 3 < N = 7: three chunks, the last holding a single row.
  c.forward = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{
        ops::fused_linear_cross_entropy(in[0], in[1], targets, ignore, 1.0, nullptr, Tensor(), 3)};
  };
  c.backward = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
    Tensor dx;
    const Tensor dW = Tensor::zeros(in[1].shape(), DType::F64);
    ops::fused_linear_cross_entropy(in[0], in[1], targets, ignore, dout[0].item(), &dx, dW, 3);
    return std::vector<Tensor>{dx, dW};
  };
  test::run_gradcheck(c, seed + 3);
}

TEST(FusedCrossEntropy, WeightGradientAccumulates) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor x = test::randn({5, 4}, seed), W = test::randn({9, 4}, seed + 1);
  const Tensor targets = targets_with_ignored(5, 9, seed + 2, -100);
  const Tensor once = Tensor::zeros({9, 4}, DType::F64), twice = Tensor::zeros({9, 4}, DType::F64);
  ops::fused_linear_cross_entropy(x, W, targets, -100, 0.5, nullptr, once, 2);
  for (int i = 0; i < 2; ++i) ops::fused_linear_cross_entropy(x, W, targets, -100, 0.25, nullptr, twice, 3);
  test::expect_close(twice, once, 1e-14, 1e-14, "two half-scale calls equal one");
}

TEST(GemmErrors, NameTheArgument) {
  const Tensor a = Tensor::zeros({3, 4}, DType::F64), b = Tensor::zeros({5, 6}, DType::F64);
  auto message_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of([&] { ops::matmul(a, b); }).find("'B'"), std::string::npos);
  EXPECT_NE(message_of([&] {
              ops::gemm(a, false, Tensor::zeros({4, 6}, DType::F64), false, Tensor::zeros({3, 5}, DType::F64));
            }).find("'C'"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              ops::gemm(a, false, Tensor::zeros({4, 6}, DType::F32), false, b);
            }).find("'B'"),
            std::string::npos);
  EXPECT_NE(message_of([&] { ops::linear(a, b); }).find("'W'"), std::string::npos);
  const Tensor x = Tensor::zeros({3, 4}, DType::F64), W = Tensor::zeros({7, 4}, DType::F64);
  EXPECT_NE(message_of([&] {
              ops::fused_linear_cross_entropy(x, W, Tensor::zeros({3}, DType::I64), -100, 1, nullptr, Tensor());
            }).find("'targets'"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              ops::fused_linear_cross_entropy(x, W, Tensor::zeros({3}, DType::I32), -100, 1, nullptr,
                                              Tensor::zeros({7, 4}, DType::F32));
            }).find("'dW_accum'"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              ops::fused_linear_cross_entropy(x, W, Tensor::full({3}, 7, DType::I32), -100, 1, nullptr, Tensor());
            }).find("target 7"),
            std::string::npos);
}

}  // namespace
}  // namespace primer
