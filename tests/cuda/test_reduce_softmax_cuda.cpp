// CUDA reductions and softmax against the f64 CPU reference on identical inputs: f32 and bf16, middle-dim sums,
// the two-pass split paths, single rows, many rows, and vocabulary-sized softmax rows.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops/reduce.h"
#include "core/ops/softmax.h"
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

const DType kDtypes[] = {DType::F32, DType::BF16};

TEST(ReduceCuda, SumAndMeanOverADimMatchCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // (shape, dim): last-dim rows with and without row splitting, middle dims with and without chunking, one row.
  const std::vector<std::pair<Shape, int>> cases = {{{300, 50}, -1},
                                                    {{7, 100003}, 1},
                                                    {{3, 1000, 67}, 1},
                                                    {{20011, 5}, 0},
                                                    {{1, 129}, 1},
                                                    {{2, 3, 4097}, 0},
                                                    {{129, 1}, 0},
                                                    {{5, 1, 9}, 1},
                                                    // inner a multiple of the pack width: vector column loads
                                                    {{6, 555, 136}, 1},
                                                    {{4099, 264}, 0},
                                                    // many short rows: a warp per row (aligned and not)
                                                    {{3001, 128}, -1},
                                                    {{2, 777, 67}, 2},
                                                    // few rows to a column sum (a GQA expansion's G copies)
                                                    {{300, 2, 128}, 1},
                                                    {{97, 3, 67}, 1},
                                                    {{1000, 15, 16}, 1}};
  for (DType dt : kDtypes) {
    for (const auto& [shape, dim] : cases) {
      const Tensor x = test::random_on_cuda(shape, seed, dt);
      const Tensor rx = test::cpu_f64(x);
      const std::string what = fmt::format("{} {} dim {}", dtype_name(dt), shape_str(shape), dim);
      test::poison_pool();
      // Sums of up to 1e5 O(1) terms: per-thread runs of <= 16 then a tree keep fp32 error near 1e-6; 2x headroom.
      test::expect_parity(ops::sum(x, dim), ops::sum(rx, dim), "sum " + what, 2.0);
      test::expect_parity(ops::mean(x, dim, true), ops::mean(rx, dim, true), "mean " + what, 2.0);
    }
  }
}

TEST(ReduceCuda, WholeTensorSumsMatchCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType dt : kDtypes) {
    for (int64_t n : {int64_t(1), int64_t(1001), int64_t(4096 * 3 + 5), int64_t(3) << 20}) {
      const Tensor x = test::random_on_cuda({n}, seed, dt);
      const auto v = test::cpu_f64(x).to_vector<double>();
      double sum = 0, sumsq = 0, abs_sum = 0;
      for (double e : v) {
        sum += e;
        sumsq += e * e;
        abs_sum += std::abs(e);
      }
      const Tensor s = ops::sum_all(x), q = ops::sumsq_all(x);
      EXPECT_EQ(s.dtype(), DType::F32);
      EXPECT_EQ(q.shape(), Shape{1});
      // fp32 summation error is at most depth * 2^-24 * sum|x|; the depth (sequential run per thread plus the two
      // block trees) stays below 40 for these sizes. bf16 inputs are exact in fp32, so the same bound holds.
      const double gamma = 40 * std::ldexp(1.0, -24);
      EXPECT_NEAR(s.item(), sum, gamma * abs_sum) << dtype_name(dt) << " n=" << n;
      EXPECT_NEAR(q.item(), sumsq, gamma * sumsq) << dtype_name(dt) << " n=" << n;
    }
  }
}

TEST(ReduceCuda, RunsTwiceToTheSameBits) {
  PRIMER_REQUIRE_CUDA();
  const Tensor x = test::random_on_cuda({3, 1000, 67}, test::fresh_seed(), DType::F32);
  EXPECT_EQ(ops::sum(x, 1).to_vector<float>(), ops::sum(x, 1).to_vector<float>());
  EXPECT_EQ(ops::sumsq_all(x).item(), ops::sumsq_all(x).item());
}

TEST(SoftmaxCuda, ForwardAndBackwardMatchCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<Shape> shapes = {{1, 1}, {5, 7}, {2, 3, 129}, {1, 1025}, {4097, 33}, {3, 8193}, {3, 151936}};
  for (DType dt : kDtypes) {
    for (const Shape& s : shapes) {
      const std::string what = fmt::format("{} {}", dtype_name(dt), shape_str(s));
      const Tensor x = test::random_on_cuda(s, seed, dt, 4.0);
      const Tensor y = ops::softmax(x);
      test::expect_parity(y, ops::softmax(test::cpu_f64(x)), "softmax " + what);
      const Tensor dy = test::random_on_cuda(s, seed + 1, dt);
      test::expect_parity(ops::softmax_backward(y, dy), ops::softmax_backward(test::cpu_f64(y), test::cpu_f64(dy)),
                          "softmax_backward " + what);
    }
  }
  // Masked logits (-inf) get probability 0; a transposed input is read through its view.
  const Tensor masked =
      Tensor::from_vector(std::vector<float>{0, -INFINITY, 1, -INFINITY}, {1, 4}, DType::F32, Device::cuda());
  const auto p = ops::softmax(masked).to_vector<float>();
  EXPECT_EQ(p[1], 0.f);
  EXPECT_NEAR(p[0] + p[2], 1.f, 1e-6f);
  const Tensor t = test::random_on_cuda({129, 37}, seed + 2, DType::F32).transpose(0, 1);
  test::expect_parity(ops::softmax(t), ops::softmax(test::cpu_f64(t)), "softmax of a transposed view");
}

}  // namespace
}  // namespace primer
