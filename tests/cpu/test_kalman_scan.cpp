// Kalman linear attention's core, the f64 token-by-token reference: its hand-written backward (two reverse scalar
// scans) against finite differences for every input, both dynamics parameters, the initial state and final-state
// gradients, with and without the variance readout; the forward against the filter written the textbook way
// (predict λ⁻ = 1/(ā²/λ + p̄), update λ = λ⁻ + k²Λᵛ, moment-form mean of the paper's Corollary 2.2), including the
// stress cases of small process noise and large observation precision; the stationary precision (1 − ā²)/p̄
// without evidence. Then ops::kalman_scan (the CPU path: chunks of trace-normalised Möbius products) against the
// reference in f64 and f32, outputs and every gradient, T ∈ {1, 7, 100, 200} (chunk 64), in the stress cases too.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/kalman_scan.h"
#include "core/ops/kalman_scan.h"
#include "core/rng.h"
#include "tests/support/kalman_inputs.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using test::kalman_inputs;
using test::KalmanInputs;

void check_gradients(const KalmanInputs& in, bool with_variance, uint64_t seed) {
  test::GradCheck check;
  check.inputs = {in.q, in.k, in.v, in.value_precision, in.a_bar, in.p_bar, in.precision, in.info_mean};
  check.names = {"q", "k", "v", "value_precision", "a_bar", "p_bar", "precision_in", "info_mean_in"};
  check.forward = [&](const std::vector<Tensor>& x) {
    const ops::KalmanScanOutputs o =
        ops::reference::kalman_scan(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], with_variance);
    std::vector<Tensor> out{o.y, o.precision, o.info_mean};
    if (with_variance) out.push_back(o.y_var);
    return out;
  };
  check.backward = [&](const std::vector<Tensor>& x, const std::vector<Tensor>& dy) {
    const ops::KalmanScanGrads g = ops::reference::kalman_scan_backward(
        dy[0], with_variance ? dy[3] : Tensor(), dy[1], dy[2], x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]);
    return std::vector<Tensor>{g.dq,           g.dk, g.dv, g.dvalue_precision, g.da_bar, g.dp_bar, g.dprecision_in,
                               g.dinfo_mean_in};
  };
  test::run_gradcheck(check, seed);
}

TEST(KalmanScanReference, BackwardMatchesFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const KalmanInputs in = kalman_inputs(2, 6, 2, 3, 4, seed);
  check_gradients(in, true, seed);
  check_gradients(in, false, seed + 1);
}

// The filter the textbook way, per element: predict λ⁻ = 1/(ā²/λ + p̄), update λ = λ⁻ + k²Λᵛ, and the moment-form
// mean μ_t = ā(1 − k²Λᵛ/λ_t) μ_{t−1} + kΛᵛv/λ_t (Corollary 2.2); y = Σ_n q μ, y_var = Σ_n q²/λ.
void expect_textbook_filter(const KalmanInputs& in, const ops::KalmanScanOutputs& o, double tol) {
  const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), N = in.q.size(3), D = in.v.size(3);
  Tensor y = Tensor::zeros(in.v.shape(), DType::F64), y_var = Tensor::zeros(in.v.shape(), DType::F64);
  auto at = [](const Tensor& t, int64_t i) { return t.data<double>()[i]; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t st = ((b * H + h) * N + n) * D + d, dyn = (h * N + n) * D + d;
          const double a = at(in.a_bar, dyn), p = at(in.p_bar, dyn);
          double lam = at(in.precision, st), mu = at(in.info_mean, st) / lam;
          for (int64_t t = 0; t < T; ++t) {
            const int64_t iq = ((b * T + t) * H + h) * N + n, iv = ((b * T + t) * H + h) * D + d;
            const double k = at(in.k, iq), lv = at(in.value_precision, iv), v = at(in.v, iv);
            lam = 1 / (a * a / lam + p) + k * k * lv;
            mu = a * (1 - k * k * lv / lam) * mu + k * lv * v / lam;
            y.data<double>()[iv] += at(in.q, iq) * mu;
            y_var.data<double>()[iv] += at(in.q, iq) * at(in.q, iq) / lam;
          }
        }
  test::expect_close(o.y, y, tol, tol, "y");
  test::expect_close(o.y_var, y_var, tol, tol, "y_var");
}

TEST(KalmanScanReference, IsTheKalmanFilterIncludingStressCases) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Default ranges; process noise down to 1e-7 (the gate f = āρ exceeds 1 and η, λ grow while μ stays bounded);
  // observation precision ×1000 (λ large, μ pinned to the evidence).
  for (const auto& [p_lo, p_hi, scale] : {std::tuple{1e-3, 0.3, 1.0}, {1e-7, 1e-5, 1.0}, {1e-3, 0.3, 1000.0}}) {
    SCOPED_TRACE("p_bar in [" + std::to_string(p_lo) + ", " + std::to_string(p_hi) + "], precision x" +
                 std::to_string(scale));
    const KalmanInputs in = kalman_inputs(2, 300, 1, 4, 3, seed, p_lo, p_hi, scale);
    const ops::KalmanScanOutputs o = ops::reference::kalman_scan(in.q, in.k, in.v, in.value_precision, in.a_bar,
                                                                 in.p_bar, in.precision, in.info_mean, true);
    expect_textbook_filter(in, o, 1e-10);
  }
}

// Without evidence (k = 0) the precision tends to the OU prior's stationary value (1 − ā²)/p̄ from any λ_0; near it
// the error shrinks by ∂λ_t/∂λ_{t−1} = ā² per step, so ā ≤ e^{−0.05} leaves < 1e-80 of it after 4000 steps.
TEST(KalmanScanReference, PrecisionTendsToTheStationaryValueWithoutEvidence) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  KalmanInputs in = kalman_inputs(1, 4000, 1, 2, 3, seed, 1e-2, 0.3);
  in.k = Tensor::zeros(in.k.shape(), DType::F64);
  for (int64_t i = 0; i < in.a_bar.numel(); ++i)
    in.a_bar.data<double>()[i] = std::exp(-0.05 - 0.95 * uniform01(seed + 9, uint64_t(i)));
  const ops::KalmanScanOutputs o = ops::reference::kalman_scan(in.q, in.k, in.v, in.value_precision, in.a_bar, in.p_bar,
                                                               in.precision, in.info_mean, false);
  for (int64_t i = 0; i < in.a_bar.numel(); ++i) {
    const double a = in.a_bar.data<double>()[i], p = in.p_bar.data<double>()[i];
    EXPECT_NEAR(o.precision.data<double>()[i], (1 - a * a) / p, 1e-12 * (1 - a * a) / p) << "element " << i;
  }
}

struct ScanCase {
  int64_t T;
  double p_lo, p_hi, precision_scale;
};
std::string scan_case_name(const ::testing::TestParamInfo<ScanCase>& i) {
  return "T" + std::to_string(i.param.T) + (i.param.p_hi < 1e-4 ? "_small_noise" : "") +
         (i.param.precision_scale > 1 ? "_large_precision" : "");
}

class KalmanScan : public ::testing::TestWithParam<ScanCase> {};

// ops::kalman_scan (chunks of trace-normalised Möbius products) in `dtype` against the reference: outputs, final
// state and every gradient, with random output and final-state gradients.
void compare_with_reference(const ScanCase& c, DType dtype, double rel_out, double rel_grad, uint64_t seed) {
  const int64_t B = 2, H = 2, N = 16, D = 8;
  const KalmanInputs in = kalman_inputs(B, c.T, H, N, D, seed, c.p_lo, c.p_hi, c.precision_scale);
  const std::vector<Tensor> x = {in.q, in.k, in.v, in.value_precision, in.a_bar, in.p_bar, in.precision, in.info_mean};
  std::vector<Tensor> xd;
  for (const Tensor& t : x) xd.push_back(t.to(dtype));
  const Tensor dy = test::randn(in.v.shape(), seed + 11), dy_var = test::randn(in.v.shape(), seed + 12),
               dlam = test::randn(in.precision.shape(), seed + 13), deta = test::randn(in.precision.shape(), seed + 14);
  const ops::KalmanScanOutputs r = ops::reference::kalman_scan(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], true);
  const ops::KalmanScanOutputs o = ops::kalman_scan(xd[0], xd[1], xd[2], xd[3], xd[4], xd[5], xd[6], xd[7], true);
  EXPECT_EQ(o.y.dtype(), dtype);
  test::expect_close(o.y, r.y, rel_out, 1e30, "y");
  test::expect_close(o.y_var, r.y_var, rel_out, 1e30, "y_var");
  test::expect_close(o.precision, r.precision, rel_out, 1e30, "precision_out");
  test::expect_close(o.info_mean, r.info_mean, rel_out, 1e30, "info_mean_out");
  const ops::KalmanScanGrads rg =
      ops::reference::kalman_scan_backward(dy, dy_var, dlam, deta, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]);
  const ops::KalmanScanGrads g =
      ops::kalman_scan_backward(dy.to(dtype), dy_var.to(dtype), dlam.to(dtype), deta.to(dtype), xd[0], xd[1], xd[2],
                                xd[3], xd[4], xd[5], xd[6], xd[7]);
  const std::pair<const Tensor*, const Tensor*> grads[] = {{&g.dq, &rg.dq},
                                                           {&g.dk, &rg.dk},
                                                           {&g.dv, &rg.dv},
                                                           {&g.dvalue_precision, &rg.dvalue_precision},
                                                           {&g.da_bar, &rg.da_bar},
                                                           {&g.dp_bar, &rg.dp_bar},
                                                           {&g.dprecision_in, &rg.dprecision_in},
                                                           {&g.dinfo_mean_in, &rg.dinfo_mean_in}};
  const char* names[] = {"dq", "dk", "dv", "dvalue_precision", "da_bar", "dp_bar", "dprecision_in", "dinfo_mean_in"};
  for (size_t i = 0; i < std::size(grads); ++i)
    test::expect_close(*grads[i].first, *grads[i].second, rel_grad, 1e30, names[i]);
}

TEST_P(KalmanScan, F64MatchesTheReference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // The same recursions; the precision through normalised Möbius products instead of step by step: f64 rounding.
  compare_with_reference(GetParam(), DType::F64, 1e-12, 1e-11, seed);
}

TEST_P(KalmanScan, F32MatchesTheReference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // f32 rounds each of the step's few operations at 2^-24 ≈ 6e-8; the recursions carry that along T steps, damped by
  // the precision's contraction ā²ρ² but amplified on the mean's path where the gate āρ exceeds 1 (small process
  // noise). Measured ≤ 1e-6 on the outputs and ≤ 6.4e-6 on the gradients (the small-noise case; 1e-7 to 5e-7
  // otherwise) over these cases.
  compare_with_reference(GetParam(), DType::F32, 5e-6, 3e-5, seed);
}

INSTANTIATE_TEST_SUITE_P(Lengths, KalmanScan,
                         ::testing::Values(ScanCase{1, 1e-3, 0.3, 1}, ScanCase{7, 1e-3, 0.3, 1},
                                           ScanCase{100, 1e-3, 0.3, 1}, ScanCase{200, 1e-3, 0.3, 1},
                                           ScanCase{200, 1e-7, 1e-5, 1}, ScanCase{200, 1e-3, 0.3, 1000}),
                         scan_case_name);

// Through the autograd node: [x1; x2] at once equals x1, then x2 from x1's final state (λ, η), in values and in
// every gradient (x2's state gradient flows back into x1's outputs), with the variance readout on.
TEST(KalmanScan, ChainingCarriesTheStateAndItsGradient) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T1 = 70, T2 = 45, H = 2, N = 4, D = 3;
  const KalmanInputs in = kalman_inputs(B, T1 + T2, H, N, D, seed);
  const Tensor R = test::randn(in.v.shape(), seed + 1), Rv = test::randn(in.v.shape(), seed + 2),
               Rl = test::randn(in.precision.shape(), seed + 3), Re = test::randn(in.precision.shape(), seed + 4);
  const ops::KalmanScanOutputs full =
      ops::kalman_scan(in.q, in.k, in.v, in.value_precision, in.a_bar, in.p_bar, in.precision, in.info_mean, true);
  const ops::KalmanScanGrads fg = ops::kalman_scan_backward(R, Rv, Rl, Re, in.q, in.k, in.v, in.value_precision,
                                                            in.a_bar, in.p_bar, in.precision, in.info_mean);
  const Tensor per_token[] = {in.q, in.k, in.v, in.value_precision};
  std::vector<ag::Var> x1, x2;
  for (const Tensor& t : per_token) {
    x1.push_back(ag::leaf(t.slice(1, 0, T1).contiguous()));
    x2.push_back(ag::leaf(t.slice(1, T1, T1 + T2).contiguous()));
  }
  const ag::Var a = ag::leaf(in.a_bar), p = ag::leaf(in.p_bar), lam0 = ag::leaf(in.precision),
                eta0 = ag::leaf(in.info_mean);
  ag::Var lam1, eta1, lam2, eta2;
  const ag::KalmanScanResult o1 = ag::kalman_scan(x1[0], x1[1], x1[2], x1[3], a, p, lam0, eta0, true, &lam1, &eta1);
  const ag::KalmanScanResult o2 = ag::kalman_scan(x2[0], x2[1], x2[2], x2[3], a, p, lam1, eta1, true, &lam2, &eta2);
  test::expect_close(o1.y->value, full.y.slice(1, 0, T1), 1e-13, 1e-12, "y, first part");
  test::expect_close(o2.y->value, full.y.slice(1, T1, T1 + T2), 1e-13, 1e-12, "y, second part");
  test::expect_close(lam2->value, full.precision, 1e-13, 1e-10, "final precision");
  test::expect_close(eta2->value, full.info_mean, 1e-13, 1e-10, "final information mean");
  o1.y->grad = R.slice(1, 0, T1).contiguous();
  o2.y->grad = R.slice(1, T1, T1 + T2).contiguous();
  o1.y_var->grad = Rv.slice(1, 0, T1).contiguous();
  o2.y_var->grad = Rv.slice(1, T1, T1 + T2).contiguous();
  lam2->grad = Rl;
  eta2->grad = Re;
  ag::current_tape().backward();
  const Tensor fgrads[] = {fg.dq, fg.dk, fg.dv, fg.dvalue_precision};
  const char* names[] = {"dq", "dk", "dv", "dvalue_precision"};
  for (size_t i = 0; i < 4; ++i) {
    test::expect_close(x1[i]->grad, fgrads[i].slice(1, 0, T1), 1e-11, 1e-9, std::string(names[i]) + ", first part");
    test::expect_close(x2[i]->grad, fgrads[i].slice(1, T1, T1 + T2), 1e-11, 1e-9,
                       std::string(names[i]) + ", second part");
  }
  test::expect_close(a->grad, fg.da_bar, 1e-11, 1e-8, "da_bar (both calls)");
  test::expect_close(p->grad, fg.dp_bar, 1e-11, 1e-8, "dp_bar (both calls)");
  test::expect_close(lam0->grad, fg.dprecision_in, 1e-11, 1e-9, "dprecision_in");
  test::expect_close(eta0->grad, fg.dinfo_mean_in, 1e-11, 1e-9, "dinfo_mean_in");
}

// Checkpoints are the CUDA forward's: the CPU forward leaves them undefined when asked, and its backward refuses some.
TEST(KalmanScan, CheckpointsAreTheCudaForwards) {
  const KalmanInputs in = kalman_inputs(1, 5, 1, 2, 3, 1);
  const ops::KalmanScanOutputs o = ops::kalman_scan(in.q, in.k, in.v, in.value_precision, in.a_bar, in.p_bar,
                                                    in.precision, in.info_mean, false, true);
  EXPECT_FALSE(o.checkpoints.defined());
  test::expect_error(
      [&] {
        ops::kalman_scan_backward(o.y, Tensor(), Tensor(), Tensor(), in.q, in.k, in.v, in.value_precision, in.a_bar,
                                  in.p_bar, in.precision, in.info_mean, Tensor::zeros({4}, DType::F64));
      },
      {"kalman_scan_backward", "CPU paths take none"});
}

}  // namespace
}  // namespace primer
