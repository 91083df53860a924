// CUDA elementwise ops against the f64 CPU reference on identical inputs, f32 and bf16, odd and broadcast shapes,
// and base pointers off the 16-byte grid (scalar path of the vectorised kernels).
#include <gtest/gtest.h>

#include "core/ops/elementwise.h"
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

using ops::Unary;
const DType kDtypes[] = {DType::F32, DType::BF16};
const Unary kUnaryOps[] = {Unary::Silu, Unary::Sigmoid, Unary::Softplus, Unary::Exp, Unary::Square};
const std::vector<Shape> kShapes = {{1}, {7}, {3, 5}, {37, 129}, {1, 1001}, {4099, 33}, {3, 333, 257}};

std::string label(const char* op, DType dt, const Shape& s) {
  return fmt::format("{} {} {}", op, dtype_name(dt), shape_str(s));
}

// A dense tensor whose first element sits one element past an aligned address.
Tensor misaligned(const Shape& shape, uint64_t seed, DType dt) {
  return test::random_on_cuda({shape_numel(shape) + 1}, seed, dt).slice(0, 1, shape_numel(shape) + 1).view(shape);
}

TEST(ElementwiseCuda, BinaryOpsBroadcastLikeCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{37, 129}, {37, 129}},
      {{37, 129}, {129}},
      {{2, 37, 1}, {37, 131}},
      {{4099, 33}, {4099, 1}},
      {{1, 7}, {5, 1}},
      {{1001}, {1}},
      {{3, 1, 5, 8}, {4, 1, 8}},
      // Last dim a multiple of the pack width: vector loads of a row, a repeated value, or (outer product) scalar.
      {{33, 256}, {256}},
      {{5, 40}, {5, 1}},
      {{64, 1}, {1, 48}},
      // Head-sized rows, many of them (one pack per thread step): a GQA expansion [.., Hk, 1, D] · [G, 1] (the
      // repeated operand's strides are not multiples of the pack), and a per-head gate [.., H, 1] · [.., H, D].
      {{6, 3, 1, 64}, {4, 1}},
      {{5, 7, 3, 1}, {5, 7, 3, 32}},
      {{9, 2, 1, 24}, {3, 1}}};
  for (DType dt : kDtypes) {
    for (const auto& [sa, sb] : cases) {
      const Tensor a = test::random_on_cuda(sa, seed, dt), b = test::random_on_cuda(sb, seed + 1, dt);
      const Tensor ra = test::cpu_f64(a), rb = test::cpu_f64(b);
      test::poison_pool();
      test::expect_parity(ops::add(a, b), ops::add(ra, rb), label("add", dt, sa));
      test::expect_parity(ops::sub(a, b), ops::sub(ra, rb), label("sub", dt, sa));
      test::expect_parity(ops::mul(a, b), ops::mul(ra, rb), label("mul", dt, sa));
    }
    // Views: a transposed operand goes through the strided kernel, a shifted dense one through the scalar path.
    const Tensor t = test::random_on_cuda({129, 37}, seed + 2, dt).transpose(0, 1);
    const Tensor m = misaligned({37, 129}, seed + 3, dt);
    test::expect_parity(ops::mul(t, m), ops::mul(test::cpu_f64(t), test::cpu_f64(m)),
                        label("mul views", dt, {37, 129}));
  }
}

TEST(ElementwiseCuda, UnaryForwardAndBackwardMatchCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType dt : kDtypes) {
    for (const Shape& s : kShapes) {
      const Tensor x = test::random_on_cuda(s, seed, dt, 3.0), dy = test::random_on_cuda(s, seed + 1, dt);
      const Tensor rx = test::cpu_f64(x), rdy = test::cpu_f64(dy);
      for (Unary op : kUnaryOps) {
        const std::string what = label("unary", dt, s) + " op " + std::to_string(int(op));
        test::expect_parity(ops::unary(op, x), ops::unary(op, rx), what);
        test::expect_parity(ops::unary_backward(op, x, dy), ops::unary_backward(op, rx, rdy), what + " backward");
      }
      test::expect_parity(ops::scale(x, -0.37), ops::scale(rx, -0.37), label("scale", dt, s));
    }
    const Tensor xm = misaligned({1001}, seed + 2, dt);
    test::expect_parity(ops::unary(Unary::Silu, xm), ops::unary(Unary::Silu, test::cpu_f64(xm)),
                        label("silu shifted", dt, {1001}));
  }
}

TEST(ElementwiseCuda, AddInPlaceAccumulatesAcrossDtypes) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType dst_dt : kDtypes) {
    for (DType src_dt : kDtypes) {
      for (const Shape& s : kShapes) {
        const Tensor dst = test::random_on_cuda(s, seed, dst_dt), src = test::random_on_cuda(s, seed + 1, src_dt);
        const Tensor ref = test::cpu_f64(dst);
        ops::add_(ref, test::cpu_f64(src), 0.3);
        ops::add_(dst, src, 0.3);
        test::expect_parity(dst, ref,
                            fmt::format("add_ {} += {} {}", dtype_name(dst_dt), dtype_name(src_dt), shape_str(s)));
      }
    }
  }
  // A non-contiguous source is read through its view.
  const Tensor dst = test::random_on_cuda({33, 65}, seed + 2, DType::F32);
  const Tensor src = test::random_on_cuda({65, 33}, seed + 3, DType::BF16).transpose(0, 1);
  const Tensor ref = test::cpu_f64(dst);
  ops::add_(ref, test::cpu_f64(src), -1.0);
  ops::add_(dst, src, -1.0);
  test::expect_parity(dst, ref, "add_ of a transposed bf16 source");
}

// a + b rounded once into another dtype (two paths' f32 gradients into an activation's bf16 one): bit for bit the f32
// sum, then its rounding; and f32 from bf16 inputs; poisoned outputs, odd lengths (the element-wise tail).
TEST(ElementwiseCuda, AddIntoAnotherDtypeRoundsTheSumOnce) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const auto& [in, out] : {std::pair{DType::F32, DType::BF16}, std::pair{DType::BF16, DType::F32}})
    for (const Shape& s : kShapes) {
      const Tensor a = test::random_on_cuda(s, seed, in), b = test::random_on_cuda(s, seed + 1, in);
      test::poison_pool();
      const Tensor sum = ops::add(a, b, out);
      ASSERT_EQ(sum.dtype(), out);
      test::expect_close(
          sum, ops::add(a.to(DType::F32), b.to(DType::F32)).to(out), 0, 0,
          fmt::format("{} + {} into {} {}", dtype_name(in), dtype_name(in), dtype_name(out), shape_str(s)));
    }
  test::expect_error(
      [&] {
        ops::add(test::random_on_cuda({4}, seed, DType::F32), test::random_on_cuda({5}, seed, DType::F32), DType::BF16);
      },
      {"add", "'b'"});
}

TEST(ElementwiseCuda, SumToShapeMatchesCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 333, 257}, {257}}, {{3, 333, 257}, {3, 1, 257}}, {{4099, 33}, {4099, 1}}, {{2, 5, 7, 9}, {5, 1, 9}}};
  for (DType dt : kDtypes) {
    for (const auto& [sg, target] : cases) {
      const Tensor g = test::random_on_cuda(sg, seed, dt);
      // Sums of up to ~1000 terms of O(1): fp32 accumulation stays near 1e-6 relative; 2x headroom on f32.
      test::expect_parity(ops::sum_to_shape(g, target), ops::sum_to_shape(test::cpu_f64(g), target),
                          label("sum_to_shape", dt, sg), 2.0);
    }
  }
}

TEST(ElementwiseCuda, ErrorsNameTheArgument) {
  PRIMER_REQUIRE_CUDA();
  const Tensor a = Tensor::zeros({4}, DType::F32, Device::cuda());
  EXPECT_THROW(ops::add(a, Tensor::zeros({4}, DType::F32)), Error);  // 'b' on the CPU
  EXPECT_THROW(ops::unary(Unary::Exp, Tensor::zeros({4}, DType::F64, Device::cuda())), Error);
}

}  // namespace
}  // namespace primer
