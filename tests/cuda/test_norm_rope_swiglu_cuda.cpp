// RMSNorm, RoPE and SwiGLU: CUDA against the CPU on fresh random inputs, f32 and bf16, odd and large shapes.
//
// Tolerances. The reference runs on the CPU on the very inputs the GPU saw (bf16 values upcast exactly), so the only
// errors are the GPU's fp32 arithmetic and the rounding of its outputs:
//   f32 outputs:  fp32 rounding (~6e-8 per operation) through a handful of operations and row sums: rel L2 1e-5.
//   bf16 outputs: round-to-nearest to 8 mantissa bits, at most 2^-9 relative per element (rms ~1.1e-3), plus the
//                 fp32 arithmetic: rel L2 4e-3, and at most 2^-8 of the largest magnitude for any one element.
//   dw (f32 accumulator, sum over up to ~2k rows in fp32, in an order different from the CPU's): rel L2 2e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/ops/elementwise.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rmsnorm_rope.h"
#include "core/ops/rope.h"
#include "core/ops/swiglu.h"
#ifdef PRIMER_WITH_CUDA
#include "core/ops/cuda/rmsnorm_rope.h"
#endif
#include "tests/support/test_util.h"

namespace primer {
namespace {

const Device kGpu = Device::cuda();

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// Compares a GPU output of dtype `dt` with its reference using the dtype's tolerance (see the file comment).
// `roundings`: bf16 roundings on the GPU's path to this output (the bf16 bounds scale with them).
void expect_matches(const Tensor& actual, const Tensor& expected, DType dt, const std::string& what,
                    double f32_rel = 1e-5, int roundings = 1) {
  const bool bf16 = dt == DType::BF16;
  const double rel = bf16 ? 4e-3 * roundings : f32_rel;
  const double per_element = bf16 ? roundings / 256.0 : f32_rel;
  test::expect_close(actual, expected, rel, per_element * max_abs(expected) + 1e-30, what);
}

// Ops allocate their outputs from the stream-ordered pool. Freeing a NaN-filled block of the same size right before
// the op makes its output very likely to land on NaN memory, so elements a kernel fails to write show up as NaN.
void poison_pool(const Tensor& like) {
  Tensor bait = Tensor::empty(like.shape(), like.dtype(), kGpu);
  test::poison(bait);
}

Tensor cpu_f64(const Tensor& t) { return t.to(Device::cpu()).to(DType::F64); }

struct Case {
  int64_t rows, D;
};

TEST(RmsNormCuda, MatchesCpuForwardAndBackward) {
  PRIMER_REQUIRE_CUDA();
  const double eps = 1e-6;
  // q/k-norm (128), hidden sizes (1024, 4096, 8192, 16384), odd widths: 1000 (a multiple of 8), 2044 (of 4 only),
  // 1003 and 37 (single elements); one row and many rows; 1 to 8 packs per thread, one or several rows per block.
  const std::vector<Case> cases = {{1, 128},   {3000, 128}, {257, 1024}, {1, 4096},  {300, 4096}, {9, 8192},
                                   {5, 16384}, {129, 1000}, {65, 2044},  {33, 1003}, {1, 37},     {2049, 37}};
  for (DType dt : {DType::F32, DType::BF16}) {
    for (const Case& c : cases) {
      if (dt == DType::F32 && c.D > 8192) continue;  // f32 rows hold at most 2048 packs of 4
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(std::string(dtype_name(dt)) + " [" + std::to_string(c.rows) + ", " + std::to_string(c.D) +
                   "] seed " + std::to_string(seed));
      Tensor x = test::randn({c.rows, c.D}, seed, dt, kGpu, 2.0);
      Tensor w = test::randn({c.D}, seed + 1, dt, kGpu);
      Tensor dy = test::randn({c.rows, c.D}, seed + 2, dt, kGpu);
      Tensor dw = test::randn({c.D}, seed + 3, DType::F32, kGpu);
      Tensor dw_ref = cpu_f64(dw);

      Tensor rstd, rstd_ref;
      poison_pool(x);
      Tensor y = ops::rmsnorm(x, w, eps, &rstd);
      Tensor y_ref = ops::rmsnorm(cpu_f64(x), cpu_f64(w), eps, &rstd_ref);
      expect_matches(y, y_ref, dt, "y");
      expect_matches(rstd, rstd_ref, DType::F32, "rstd");

      poison_pool(x);
      Tensor dx = ops::rmsnorm_backward(dy, x, w, rstd, dw);
      Tensor dx_ref = ops::rmsnorm_backward(cpu_f64(dy), cpu_f64(x), cpu_f64(w), rstd_ref, dw_ref);
      expect_matches(dx, dx_ref, dt, "dx");
      expect_matches(dw, dw_ref, DType::F32, "dw", 2e-5);
    }
  }
}

TEST(RmsNormCuda, BackwardIsDeterministic) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t D : {128, 4096, 1003}) {
    Tensor x = test::randn({5000, D}, seed, DType::BF16, kGpu), w = test::randn({D}, seed + 1, DType::BF16, kGpu);
    Tensor dy = test::randn({5000, D}, seed + 2, DType::BF16, kGpu);
    Tensor rstd;
    ops::rmsnorm(x, w, 1e-6, &rstd);
    Tensor a = Tensor::zeros({D}, DType::F32, kGpu), b = Tensor::zeros({D}, DType::F32, kGpu);
    ops::rmsnorm_backward(dy, x, w, rstd, a);
    ops::rmsnorm_backward(dy, x, w, rstd, b);
    EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>()) << "D = " << D;
  }
}

TEST(RmsNormCuda, RowsBeyondTheRegisterBudgetAreRefused) {
  PRIMER_REQUIRE_CUDA();
  for (auto [dt, D] : {std::pair{DType::F32, int64_t(8196)}, std::pair{DType::BF16, int64_t(2050)}}) {
    Tensor x = Tensor::zeros({2, D}, dt, kGpu), w = Tensor::zeros({D}, dt, kGpu);
    EXPECT_THROW(ops::rmsnorm(x, w, 1e-6, nullptr), Error) << dtype_name(dt) << " D = " << D;
  }
}

// A view that starts one element into its storage is contiguous but not 16-byte aligned: narrow packs are used.
TEST(RmsNormCuda, UnalignedViewsMatchCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType dt : {DType::F32, DType::BF16}) {
    const int64_t rows = 40, D = 512;
    Tensor x = test::randn({rows * D + 1}, seed, dt, kGpu).slice(0, 1, rows * D + 1).view({rows, D});
    Tensor w = test::randn({D + 1}, seed + 1, dt, kGpu).slice(0, 1, D + 1);
    Tensor dy = test::randn({rows, D}, seed + 2, dt, kGpu);
    Tensor dw = Tensor::zeros({D}, DType::F32, kGpu), dw_ref = Tensor::zeros({D}, DType::F64);
    Tensor rstd, rstd_ref;
    expect_matches(ops::rmsnorm(x, w, 1e-6, &rstd), ops::rmsnorm(cpu_f64(x), cpu_f64(w), 1e-6, &rstd_ref), dt, "y");
    expect_matches(ops::rmsnorm_backward(dy, x, w, rstd, dw),
                   ops::rmsnorm_backward(cpu_f64(dy), cpu_f64(x), cpu_f64(w), rstd_ref, dw_ref), dt, "dx");
    expect_matches(dw, dw_ref, DType::F32, "dw", 2e-5);
  }
}

// The spec forms the angle as one fp32 multiply, so the reference is the CPU f32 path (same angle bit for bit);
// the f64 path would differ by up to |angle| * 2^-24 at large positions.
TEST(RopeCuda, MatchesCpuForwardAndBackward) {
  PRIMER_REQUIRE_CUDA();
  const std::vector<Shape> shapes = {{2, 5, 3, 128}, {1, 1, 1, 128}, {4, 33, 8, 128}, {3, 7, 4, 64},
                                     {2, 3, 5, 74},  {1, 9, 2, 2},   {2, 17, 6, 80}};
  for (DType dt : {DType::F32, DType::BF16}) {
    for (const Shape& s : shapes) {
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(s) + " seed " + std::to_string(seed));
      Tensor x = test::randn(s, seed, dt, kGpu);
      Tensor pos = test::rand_ints({s[0], s[1]}, seed + 1, 0, 32768, DType::I32, kGpu);
      Tensor inv_freq = ops::rope_inv_freq(s[3], 1e6);
      Tensor x_ref = x.to(Device::cpu()).to(DType::F32), pos_ref = pos.to(Device::cpu());
      poison_pool(x);
      expect_matches(ops::rope(x, pos, inv_freq.to(kGpu)), ops::rope(x_ref, pos_ref, inv_freq), dt, "rope");
      poison_pool(x);
      expect_matches(ops::rope_backward(x, pos, inv_freq.to(kGpu)), ops::rope_backward(x_ref, pos_ref, inv_freq), dt,
                     "rope_backward");
    }
  }
}

#ifdef PRIMER_WITH_CUDA  // asks the launcher which shapes it fuses
// The per-head norm and rotation of Qwen3's q and k in one pass (ops::rmsnorm_rope) against the two ops on the CPU
// (f32, so that the angles are the same fp32 products): head_dim 64/128/256 and the kernel's smallest head (fused),
// 80 and 96 (not a power of two: the two ops on the GPU), head counts that leave the kernel's batch of four heads a
// remainder, token counts that leave its last block part empty; dy of x's dtype and, for bf16, f32 (attention's dq
// before rounding); dw added to what the accumulator held. The fused kernel keeps the normalised head in fp32 and the
// reference rounds nothing either: one rounding of the output.
TEST(RmsNormRopeCuda, MatchesCpuForwardAndBackward) {
  PRIMER_REQUIRE_CUDA();
  const std::vector<Shape> shapes = {{2, 5, 3, 128}, {1, 1, 1, 128}, {4, 33, 16, 128}, {3, 7, 8, 64},
                                     {2, 3, 5, 256}, {2, 9, 2, 16},  {1, 4, 2, 96},    {2, 17, 6, 80}};
  for (DType dt : {DType::F32, DType::BF16}) {
    for (const Shape& s : shapes) {
      for (DType dy_dt : {dt, DType::F32}) {
        if (dy_dt != dt && dt != DType::BF16) continue;
        const uint64_t seed = test::fresh_seed();
        SCOPED_TRACE(std::string(dtype_name(dt)) + " dy " + dtype_name(dy_dt) + " " + shape_str(s) + " seed " +
                     std::to_string(seed));
        const Tensor x = test::randn(s, seed, dt, kGpu, 2.0);
        const Tensor w = ops::add(test::randn({s[3]}, seed + 1, dt, kGpu, 0.3), Tensor::full({s[3]}, 1.0, dt, kGpu));
        const Tensor dy = test::randn(s, seed + 2, dy_dt, kGpu);
        const Tensor pos = test::rand_ints({s[0], s[1]}, seed + 3, 0, 32768, DType::I32, kGpu);
        const Tensor inv_freq = ops::rope_inv_freq(s[3], 1e6);
        const Tensor dw0 = test::randn({s[3]}, seed + 4, DType::F32);
        auto ref = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::F32); };

        Tensor rstd, rstd_ref;
        poison_pool(x);
        const Tensor y = ops::rmsnorm_rope(x, w, 1e-6, pos, inv_freq.to(kGpu), &rstd);
        const Tensor y_ref = ops::rope(ops::rmsnorm(ref(x), ref(w), 1e-6, &rstd_ref), pos.to(Device::cpu()), inv_freq);
        // Heads the fused kernels do not take run as the two ops on the GPU too, rounding the normalised head (y) or
        // the rotated gradient (dx, dw) to bf16 in between: two roundings.
        const int roundings =
            ops::cuda_ops::norm_rope_supported({s[0] * s[1], s[2], s[3], dt}, {x.data_ptr(), w.data_ptr()}) ? 1 : 2;
        expect_matches(y, y_ref, dt, "y", 1e-5, roundings);
        expect_matches(rstd, rstd_ref, DType::F32, "rstd");

        Tensor dw = dw0.to(kGpu), dw_ref = dw0.clone();
        poison_pool(x);
        const Tensor dx = ops::rmsnorm_rope_backward(dy, x, w, rstd, pos, inv_freq.to(kGpu), dw);
        const Tensor dx_ref = ops::rmsnorm_backward(ops::rope_backward(ref(dy), pos.to(Device::cpu()), inv_freq),
                                                    ref(x), ref(w), rstd_ref, dw_ref);
        expect_matches(dx, dx_ref, dt, "dx", 1e-5, roundings);
        expect_matches(dw, dw_ref, dt, "dw", 2e-5, roundings);

        Tensor dw_again = dw0.to(kGpu);
        const Tensor dx_again = ops::rmsnorm_rope_backward(dy, x, w, rstd, pos, inv_freq.to(kGpu), dw_again);
        EXPECT_EQ(dx_again.to_vector<double>(), dx.to_vector<double>()) << "dx not deterministic";
        EXPECT_EQ(dw_again.to_vector<double>(), dw.to_vector<double>()) << "dw not deterministic";
      }
    }
  }
}

// The shapes of the models this op is for take the fused kernels (the test above passes either way).
TEST(RmsNormRopeCuda, QwenHeadsTakeTheFusedKernels) {
  PRIMER_REQUIRE_CUDA();
  const Tensor a = Tensor::empty({1024}, DType::F32, kGpu);
  for (DType dt : {DType::BF16, DType::F32})
    for (int64_t head_dim : {64, 128})
      EXPECT_TRUE(ops::cuda_ops::norm_rope_supported({4096, 16, head_dim, dt}, {a.data_ptr()}))
          << dtype_name(dt) << " head_dim " << head_dim;
  EXPECT_FALSE(ops::cuda_ops::norm_rope_supported({4096, 16, 96, DType::BF16}, {a.data_ptr()}));
  EXPECT_FALSE(
      ops::cuda_ops::norm_rope_supported({4096, 16, 128, DType::BF16}, {static_cast<const char*>(a.data_ptr()) + 2}));
}
#endif

TEST(SwiGluCuda, MatchesCpuForwardAndBackward) {
  PRIMER_REQUIRE_CUDA();
  const std::vector<Shape> shapes = {{1}, {7}, {1000, 37}, {8, 11008}, {3, 4097}, {129, 512}};
  for (DType dt : {DType::F32, DType::BF16}) {
    for (const Shape& s : shapes) {
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(s) + " seed " + std::to_string(seed));
      Tensor gate = test::randn(s, seed, dt, kGpu, 3.0), up = test::randn(s, seed + 1, dt, kGpu);
      Tensor dh = test::randn(s, seed + 2, dt, kGpu);
      poison_pool(gate);
      expect_matches(ops::swiglu(gate, up), ops::swiglu(cpu_f64(gate), cpu_f64(up)), dt, "h");
      Tensor dgate, dup, dgate_ref, dup_ref;
      poison_pool(gate);
      poison_pool(gate);
      ops::swiglu_backward(dh, gate, up, &dgate, &dup);
      ops::swiglu_backward(cpu_f64(dh), cpu_f64(gate), cpu_f64(up), &dgate_ref, &dup_ref);
      expect_matches(dgate, dgate_ref, dt, "dgate");
      expect_matches(dup, dup_ref, dt, "dup");
    }
  }
}

TEST(SwiGluCuda, UnalignedViewsMatchCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType dt : {DType::F32, DType::BF16}) {
    const int64_t n = 4096;
    Tensor gate = test::randn({n + 1}, seed, dt, kGpu, 3.0).slice(0, 1, n + 1);
    Tensor up = test::randn({n}, seed + 1, dt, kGpu);
    expect_matches(ops::swiglu(gate, up), ops::swiglu(cpu_f64(gate), cpu_f64(up)), dt, "h");
  }
}

}  // namespace
}  // namespace primer
