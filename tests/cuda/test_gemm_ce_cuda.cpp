#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/ops/cross_entropy.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

// Tolerances (relative L2). Every CUDA result is compared with the f64 CPU result on the same (bf16-rounded) inputs:
// - f32 output: only fp32 accumulation order differs, ~1e-6 for K <= 300; 1e-5 leaves margin.
// - bf16 output: one rounding, at most 2^-8 relative per element, rms ~2^-9 -> rel L2 <= 4e-3.
constexpr double kF32Tol = 1e-5, kBf16Tol = 4e-3;

Tensor cpu_f64(const Tensor& t) { return t.to(Device::cpu()).to(DType::F64); }

double max_magnitude(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// The element-wise bound is the relative one scaled to the largest element (bf16 rounds each element by <= 2^-8).
void expect_matches(const Tensor& actual, const Tensor& expected, double rel_tol, const std::string& what) {
  test::expect_close(actual, expected, rel_tol, 2 * rel_tol * max_magnitude(expected) + 1e-30, what);
}

struct GemmCase {
  int64_t batch, m, n, k;
};

Shape with_batch(int64_t batch, Shape s) {
  if (batch) s.insert(s.begin(), batch);
  return s;
}

TEST(GemmCuda, MatchesCpuForEveryTransposeDtypeAndShape) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda();
  const GemmCase cases[] = {{0, 77, 130, 96}, {0, 1, 257, 33}, {0, 300, 5, 129}, {0, 128, 256, 64}, {3, 45, 70, 31}};
  const std::pair<DType, DType> types[] = {
      {DType::BF16, DType::BF16}, {DType::BF16, DType::F32}, {DType::F32, DType::F32}};
  int salt = 0;
  for (const GemmCase& g : cases)
    for (auto [in_type, out_type] : types)
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        SCOPED_TRACE(fmt::format("batch {} m {} n {} k {} in {} out {} trans_a {} trans_b {}", g.batch, g.m, g.n, g.k,
                                 dtype_name(in_type), dtype_name(out_type), ta, tb));
        ++salt;
        const Tensor A =
            test::randn(with_batch(g.batch, ta ? Shape{g.k, g.m} : Shape{g.m, g.k}), seed + 3 * salt, in_type, gpu);
        const Tensor B =
            test::randn(with_batch(g.batch, tb ? Shape{g.n, g.k} : Shape{g.k, g.n}), seed + 3 * salt + 1, in_type, gpu);
        const Tensor C = Tensor::empty(with_batch(g.batch, {g.m, g.n}), out_type, gpu);
        test::poison(C);
        ops::gemm(A, ta, B, tb, C);
        const Tensor expected = Tensor::empty(C.shape(), DType::F64);
        ops::gemm(cpu_f64(A), ta, cpu_f64(B), tb, expected);
        expect_matches(C, expected, out_type == DType::BF16 ? kBf16Tol : kF32Tol, "C");
      }
}

TEST(GemmCuda, AccumulatesIntoF32WithBetaOne) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda();
  // The weight-gradient pattern: dW[out, in] (f32) += dy^T @ x with bf16 dy [T, out], x [T, in].
  const Tensor dy = test::randn({203, 77}, seed, DType::BF16, gpu),
               x = test::randn({203, 130}, seed + 1, DType::BF16, gpu);
  const Tensor dW = test::randn({77, 130}, seed + 2, DType::F32, gpu);
  const Tensor expected = cpu_f64(dW);
  ops::gemm(dy, true, x, false, dW, 1.0, 1.0);
  ops::gemm(cpu_f64(dy), true, cpu_f64(x), false, expected, 1.0, 1.0);
  expect_matches(dW, expected, kF32Tol, "dW");
}

TEST(GemmCuda, AutotuningNeverTouchesTheCallersOutput) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda();
  // A layout no other test uses, so this call creates (and tunes) its plan: beta = 1 must accumulate exactly once.
  const Tensor A = test::randn({2, 61, 83}, seed, DType::BF16, gpu),
               B = test::randn({2, 83, 59}, seed + 1, DType::BF16, gpu);
  const Tensor C = test::randn({2, 61, 59}, seed + 2, DType::F32, gpu);
  const Tensor expected = cpu_f64(C);
  ops::set_gemm_autotune(true);
  ops::gemm(A, false, B, false, C, 1.0, 1.0);
  ops::set_gemm_autotune(false);
  ops::gemm(cpu_f64(A), false, cpu_f64(B), false, expected, 1.0, 1.0);
  expect_matches(C, expected, kF32Tol, "C");
}

TEST(GemmCuda, TakesStridedSlicesOfA) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda();
  const Tensor big = test::randn({77, 96 + 16}, seed, DType::BF16, gpu);
  const Tensor B = test::randn({130, 96}, seed + 1, DType::BF16, gpu);
  // 16-byte aligned slice (offset 8 elements, row stride 112) and a misaligned one (offset 3, row stride 112).
  for (int64_t start : {8, 3}) {
    SCOPED_TRACE("column offset " + std::to_string(start));
    const Tensor A = big.slice(1, start, start + 96);
    const Tensor C = Tensor::empty({77, 130}, DType::F32, gpu);
    test::poison(C);
    ops::gemm(A, false, B, true, C);
    const Tensor expected = Tensor::empty({77, 130}, DType::F64);
    ops::gemm(cpu_f64(A), false, cpu_f64(B), true, expected);
    expect_matches(C, expected, kF32Tol, "C");
  }
}

TEST(LinearCuda, ForwardAndBackwardMatchCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda();
  const Tensor x = test::randn({3, 41, 96}, seed, DType::BF16, gpu),
               W = test::randn({130, 96}, seed + 1, DType::BF16, gpu);
  const Tensor dy = test::randn({3, 41, 130}, seed + 2, DType::BF16, gpu);
  const Tensor dW = test::randn({130, 96}, seed + 3, DType::F32, gpu);
  const Tensor dW_ref = cpu_f64(dW);
  Tensor dx, dx_ref;
  const Tensor y = ops::linear(x, W);
  ops::linear_backward(dy, x, W, &dx, dW);
  ops::linear_backward(cpu_f64(dy), cpu_f64(x), cpu_f64(W), &dx_ref, dW_ref);
  expect_matches(y, ops::linear(cpu_f64(x), cpu_f64(W)), kBf16Tol, "y");
  expect_matches(dx, dx_ref, kBf16Tol, "dx");
  expect_matches(dW, dW_ref, kF32Tol, "dW");
}

// Leaves NaN in the pool block the op's next allocation of this size will most likely reuse, so an unwritten
// element of an op-allocated output shows up as NaN.
void poison_pool(const Shape& shape, DType dtype) {
  const Tensor t = Tensor::empty(shape, dtype, Device::cuda());
  test::poison(t);
}

// The input-gradient pattern of a second projection of one input: dx = dy @ W + the gradient x already holds, summed
// in the GEMM's epilogue (a 16-byte aligned addend) or by a copy first (a misaligned one); the addend stays untouched.
TEST(LinearCuda, BackwardAddsTheGradientAlreadyHeld) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda();
  for (DType dt : {DType::BF16, DType::F32}) {
    const Tensor x = test::randn({3, 41, 96}, seed, dt, gpu), W = test::randn({130, 96}, seed + 1, dt, gpu);
    const Tensor dy = test::randn({3, 41, 130}, seed + 2, dt, gpu);
    const Tensor held = test::randn({3 * 41 * 96 + 1}, seed + 3, dt, gpu);
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE(fmt::format("{} addend at element offset {}", dtype_name(dt), offset));
      const Tensor addend = held.slice(0, offset, offset + 3 * 41 * 96).view({3, 41, 96});
      const std::vector<double> before = addend.to(Device::cpu()).to_vector<double>();
      poison_pool({3 * 41, 96}, dt);
      Tensor dx, dx_ref;
      ops::linear_backward(dy, x, W, &dx, Tensor(), addend);
      ops::linear_backward(cpu_f64(dy), cpu_f64(x), cpu_f64(W), &dx_ref, Tensor());
      expect_matches(dx, ops::add(dx_ref, cpu_f64(addend)), dt == DType::BF16 ? kBf16Tol : kF32Tol, "dx");
      EXPECT_EQ(addend.to(Device::cpu()).to_vector<double>(), before) << "the addend was written";
    }
  }
}

TEST(FusedCrossEntropyCuda, MatchesCpuOnTheSameInputs) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda();
  struct Case {
    int64_t n, d, vocab, chunk;
    DType dtype;
  };
  const Case cases[] = {{37, 64, 1000, 16, DType::BF16},
                        {37, 64, 1000, 16, DType::F32},
                        {5, 64, 151936, 4096, DType::BF16},
                        {9, 72, 1001, 4, DType::BF16}};
  const int64_t ignore = -100;
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("n {} d {} V {} chunk {} {}", c.n, c.d, c.vocab, c.chunk, dtype_name(c.dtype)));
    const Tensor x = test::randn({c.n, c.d}, seed, c.dtype, gpu);
    const Tensor W = test::randn({c.vocab, c.d}, seed + 1, c.dtype, gpu, 0.3);  // logits with std ~2.4
    auto t = test::rand_ints({c.n}, seed + 2, 0, c.vocab).to_vector<int32_t>();
    for (size_t i = 2; i < t.size(); i += 4) t[i] = int32_t(ignore);
    const Tensor targets = Tensor::from_vector(t, {c.n}, DType::I32, gpu);
    const Tensor dW = test::randn({c.vocab, c.d}, seed + 3, DType::F32, gpu);
    const Tensor dW_ref = cpu_f64(dW);
    const double scale = 1.0 / 7;
    Tensor dx, dx_ref;
    poison_pool({c.n, c.d}, c.dtype);
    const Tensor loss = ops::fused_linear_cross_entropy(x, W, targets, ignore, scale, &dx, dW, c.chunk);
    const Tensor loss_ref = ops::fused_linear_cross_entropy(cpu_f64(x), cpu_f64(W), targets.to(Device::cpu()), ignore,
                                                            scale, &dx_ref, dW_ref, c.chunk);
    // fp32 logits and fp32 softmax (fast exp/log, ~1e-6 relative) in every case: the loss is within 1e-5.
    expect_matches(loss, loss_ref, kF32Tol, "loss");
    // bf16: the (softmax - onehot) gradient is rounded to bf16 before its GEMMs (<= 2^-8 relative per element), and
    // dx is rounded once more: two independent roundings -> rel L2 <= 6e-3 for dx, 4e-3 for the f32 dW.
    const bool bf = c.dtype == DType::BF16;
    expect_matches(dx, dx_ref, bf ? 6e-3 : 2 * kF32Tol, "dx");
    expect_matches(dW, dW_ref, bf ? kBf16Tol : 2 * kF32Tol, "dW");
  }
}

}  // namespace
}  // namespace primer
