// Kalman linear attention's CUDA core against the f64 token-by-token reference on the same rounded inputs: y, y_var,
// the final (λ, η) and every gradient (q, k, v, Λᵛ, ā, p̄, the initial state, with output and final-state gradients
// flowing in), for T ∈ {1, 7, 100, 200, 300} (the backward's checkpoints every 64 tokens and pieces of 8), N ∈ {16,
// 64, 128} state slots, D ∈ {8, 12, 64, 128} channels (12: a CTA of 8 channels half empty), f32 and bf16 per-token
// tensors, and the paper's stress cases (small process noise, large observation precision). The backward runs from
// the forward's checkpoints (what training does) and, again, recomputing them itself.
//
// Tolerances (relative L2 against the reference):
//  - f32 throughout: the kernels do the CPU path's f32 arithmetic in another order (the moment form, a reciprocal
//    within 1 ulp, sums over n and d in other orders), so the CPU path's bounds hold: 5e-6 on outputs and states,
//    3e-5 on gradients (tests/cpu/test_kalman_scan.cpp; measured there ≤ 1e-6 and ≤ 6.4e-6).
//  - bf16 per-token tensors: y, y_var, dq, dk, dv and dΛᵛ are stored in bf16, a 2^-9 ≈ 2e-3 rounding of each element,
//    so 4e-3 (the parity bound of every bf16 output); the states and ā, p̄, λ₀, η₀ gradients stay f32 from the same
//    rounded inputs, at the f32 bounds.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/ops/kalman_scan.h"
#include "tests/cuda/parity_util.h"
#include "tests/support/kalman_inputs.h"

namespace primer {
namespace {

constexpr double kF32Out = 5e-6, kF32Grad = 3e-5, kBf16 = 4e-3;

struct Case {
  int64_t T, N, D;
  DType dtype;
  double p_lo = 1e-3, p_hi = 0.3, precision_scale = 1;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  const Case& c = i.param;
  return "T" + std::to_string(c.T) + "_N" + std::to_string(c.N) + "_D" + std::to_string(c.D) +
         (c.p_hi < 1e-4 ? "_small_noise" : "") + (c.precision_scale > 1 ? "_large_precision" : "") +
         (c.dtype == DType::BF16 ? "_bf16" : "_f32");
}

class KalmanScanCuda : public ::testing::TestWithParam<Case> {};

TEST_P(KalmanScanCuda, MatchesTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Case& c = GetParam();
  const int64_t B = 2, H = 2;
  const test::KalmanInputs in = test::kalman_inputs(B, c.T, H, c.N, c.D, seed, c.p_lo, c.p_hi, c.precision_scale);
  auto gpu = [](const Tensor& t, DType dt) { return t.to(dt).to(Device::cuda()); };
  const Tensor q = gpu(in.q, c.dtype), k = gpu(in.k, c.dtype), v = gpu(in.v, c.dtype),
               lv = gpu(in.value_precision, c.dtype), a = gpu(in.a_bar, DType::F32), p = gpu(in.p_bar, DType::F32),
               lam0 = gpu(in.precision, DType::F32), eta0 = gpu(in.info_mean, DType::F32);
  const Tensor dy = gpu(test::randn(in.v.shape(), seed + 11), c.dtype),
               dy_var = gpu(test::randn(in.v.shape(), seed + 12), c.dtype),
               dlam = gpu(test::randn(in.precision.shape(), seed + 13), DType::F32),
               deta = gpu(test::randn(in.precision.shape(), seed + 14), DType::F32);
  // The reference sees exactly the values the GPU got.
  const std::vector<Tensor> r = {test::cpu_f64(q), test::cpu_f64(k), test::cpu_f64(v),    test::cpu_f64(lv),
                                 test::cpu_f64(a), test::cpu_f64(p), test::cpu_f64(lam0), test::cpu_f64(eta0)};
  const bool bf16 = c.dtype == DType::BF16;
  const double token_out = bf16 ? kBf16 : kF32Out, token_grad = bf16 ? kBf16 : kF32Grad;

  test::poison_pool();
  const ops::KalmanScanOutputs o = ops::kalman_scan(q, k, v, lv, a, p, lam0, eta0, true, true);
  ASSERT_TRUE(o.checkpoints.defined());
  const ops::KalmanScanOutputs ro = ops::reference::kalman_scan(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], true);
  EXPECT_EQ(o.y.dtype(), c.dtype);
  EXPECT_EQ(o.precision.dtype(), DType::F32);
  test::expect_rel(o.y, ro.y, token_out, "y");
  test::expect_rel(o.y_var, ro.y_var, token_out, "y_var");
  test::expect_rel(o.precision, ro.precision, kF32Out, "precision_out");
  test::expect_rel(o.info_mean, ro.info_mean, kF32Out, "info_mean_out");
  // Without the variance readout the same mean.
  test::expect_rel(ops::kalman_scan(q, k, v, lv, a, p, lam0, eta0, false).y, ro.y, token_out, "y (no variance)");

  test::poison_pool();
  const ops::KalmanScanGrads g =
      ops::kalman_scan_backward(dy, dy_var, dlam, deta, q, k, v, lv, a, p, lam0, eta0, o.checkpoints);
  const ops::KalmanScanGrads rg =
      ops::reference::kalman_scan_backward(test::cpu_f64(dy), test::cpu_f64(dy_var), test::cpu_f64(dlam),
                                           test::cpu_f64(deta), r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
  EXPECT_EQ(g.dq.dtype(), c.dtype);
  test::expect_rel(g.dq, rg.dq, token_grad, "dq");
  test::expect_rel(g.dk, rg.dk, token_grad, "dk");
  test::expect_rel(g.dv, rg.dv, token_grad, "dv");
  test::expect_rel(g.dvalue_precision, rg.dvalue_precision, token_grad, "dvalue_precision");
  test::expect_rel(g.da_bar, rg.da_bar, kF32Grad, "da_bar");
  test::expect_rel(g.dp_bar, rg.dp_bar, kF32Grad, "dp_bar");
  test::expect_rel(g.dprecision_in, rg.dprecision_in, kF32Grad, "dprecision_in");
  test::expect_rel(g.dinfo_mean_in, rg.dinfo_mean_in, kF32Grad, "dinfo_mean_in");
  {  // Recomputing the checkpoints gives the same states: the tensors each thread writes whole are equal bitwise; dq,
     // dk, dā and dp̄ are sums in f32 atomics (over 8-channel CTAs, the batch) whose order varies from run to run, a
     // few ulp of f32 (2^-24 ≈ 6e-8 relative each): within 1e-6; stored in bf16, a sum that lies at a rounding
     // boundary rounds either way (one bf16 ulp, 2^-8, on a few elements), so the bf16 parity bound there.
    const double atomics = bf16 ? kBf16 : 1e-6;
    const ops::KalmanScanGrads recomputed =
        ops::kalman_scan_backward(dy, dy_var, dlam, deta, q, k, v, lv, a, p, lam0, eta0);
    test::expect_close(g.dv, recomputed.dv, 0, 0, "dv from the kept checkpoints");
    test::expect_close(g.dvalue_precision, recomputed.dvalue_precision, 0, 0,
                       "dvalue_precision from the kept checkpoints");
    test::expect_close(g.dprecision_in, recomputed.dprecision_in, 0, 0, "dprecision_in from the kept checkpoints");
    test::expect_close(g.dinfo_mean_in, recomputed.dinfo_mean_in, 0, 0, "dinfo_mean_in from the kept checkpoints");
    test::expect_close(g.dq, recomputed.dq, atomics, 1e30, "dq from the kept checkpoints");
    test::expect_close(g.dk, recomputed.dk, atomics, 1e30, "dk from the kept checkpoints");
    test::expect_close(g.da_bar, recomputed.da_bar, 1e-6, 1e30, "da_bar from the kept checkpoints");
    test::expect_close(g.dp_bar, recomputed.dp_bar, 1e-6, 1e30, "dp_bar from the kept checkpoints");
  }

  // Only the output gradient (no variance readout, no final-state gradient): the kernels' null paths.
  const ops::KalmanScanGrads g1 =
      ops::kalman_scan_backward(dy, Tensor(), Tensor(), Tensor(), q, k, v, lv, a, p, lam0, eta0);
  const ops::KalmanScanGrads rg1 = ops::reference::kalman_scan_backward(test::cpu_f64(dy), Tensor(), Tensor(), Tensor(),
                                                                        r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
  test::expect_rel(g1.dk, rg1.dk, token_grad, "dk (dy only)");
  test::expect_rel(g1.dprecision_in, rg1.dprecision_in, kF32Grad, "dprecision_in (dy only)");
}

INSTANTIATE_TEST_SUITE_P(Shapes, KalmanScanCuda,
                         ::testing::Values(Case{1, 16, 8, DType::F32}, Case{7, 16, 12, DType::F32},
                                           Case{100, 64, 64, DType::F32}, Case{200, 128, 128, DType::F32},
                                           Case{300, 128, 64, DType::F32}, Case{1, 64, 64, DType::BF16},
                                           Case{100, 128, 128, DType::BF16}, Case{300, 64, 12, DType::BF16},
                                           Case{200, 16, 8, DType::F32, 1e-7, 1e-5},
                                           Case{200, 16, 8, DType::F32, 1e-3, 0.3, 1000}),
                         case_name);

TEST(KalmanScanCudaErrors, SlotsMustBeAMultipleOf16) {
  PRIMER_REQUIRE_CUDA();
  const test::KalmanInputs in = test::kalman_inputs(1, 3, 1, 8, 4, 1);
  auto gpu = [](const Tensor& t) { return t.to(DType::F32).to(Device::cuda()); };
  test::expect_error(
      [&] {
        ops::kalman_scan(gpu(in.q), gpu(in.k), gpu(in.v), gpu(in.value_precision), gpu(in.a_bar), gpu(in.p_bar),
                         gpu(in.precision), gpu(in.info_mean), false);
      },
      {"kalman_scan", "multiple of 16"});
}

// A backward handed checkpoints that are not the forward's (another shape's) is refused, not read past their end.
TEST(KalmanScanCudaErrors, CheckpointsMustBeTheForwards) {
  PRIMER_REQUIRE_CUDA();
  const test::KalmanInputs in = test::kalman_inputs(1, 70, 1, 16, 8, 1);
  auto gpu = [](const Tensor& t) { return t.to(DType::F32).to(Device::cuda()); };
  const Tensor q = gpu(in.q), k = gpu(in.k), v = gpu(in.v), lv = gpu(in.value_precision), a = gpu(in.a_bar),
               p = gpu(in.p_bar), lam0 = gpu(in.precision), eta0 = gpu(in.info_mean);
  const ops::KalmanScanOutputs o = ops::kalman_scan(q, k, v, lv, a, p, lam0, eta0, false, true);
  const Tensor dy = gpu(test::randn(in.v.shape(), 2));
  const Tensor short_by_one_chunk = o.checkpoints.slice(0, 0, o.checkpoints.numel() / 3 * 2);
  test::expect_error(
      [&] {
        ops::kalman_scan_backward(dy, Tensor(), Tensor(), Tensor(), q, k, v, lv, a, p, lam0, eta0, short_by_one_chunk);
      },
      {"kalman_scan_backward", "checkpoints must be the forward's"});
}

}  // namespace
}  // namespace primer
