#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/ops/chebyshev_solve.h"
#include "tests/support/chebyshev_inputs.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using ops::ChebyshevGrads;
using ops::ChebyshevOptions;
using test::ChebyshevInputs;

ChebyshevOptions options(double ridge, int64_t num_iter, bool bp_lambda = true) {
  ChebyshevOptions o;
  o.ridge = ridge;
  o.num_iter = num_iter;
  o.bp_lambda = bp_lambda;
  return o;
}

Tensor to_dtype(const Tensor& t, DType dtype) { return t.defined() ? t.to(dtype) : Tensor(); }

// x = A⁻¹ b by Gaussian elimination with partial pivoting (A is n x n, row-major, f64).
std::vector<double> dense_solve(std::vector<double> A, std::vector<double> b) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::abs(A[r * n + c]) > std::abs(A[p * n + c])) p = r;
    for (size_t j = 0; j < n; ++j) std::swap(A[c * n + j], A[p * n + j]);
    std::swap(b[c], b[p]);
    for (size_t r = c + 1; r < n; ++r) {
      const double f = A[r * n + c] / A[c * n + c];
      for (size_t j = c; j < n; ++j) A[r * n + j] -= f * A[c * n + j];
      b[r] -= f * b[c];
    }
  }
  std::vector<double> x(n);
  for (size_t i = n; i-- > 0;) {
    double s = b[i];
    for (size_t j = i + 1; j < n; ++j) s -= A[i * n + j] * x[j];
    x[i] = s / A[i * n + i];
  }
  return x;
}

// The ridge regression solved exactly, token by token, with the test's own recurrence: x_t = (H_t + λ_t I)⁻¹ q_t.
// `lambda` [B, T, H] fixes λ_t (the bp_lambda = false gradient is the gradient with λ held); undefined: λ_t =
// ridge·‖H_t‖_F. Returns {x, H_T}; *lambda_out (if given) receives the λ_t used.
std::vector<Tensor> exact_solve(const ChebyshevInputs& in, double ridge, const Tensor& lambda, Tensor* lambda_out) {
  const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), D = in.q.size(3);
  Tensor x = Tensor::empty(in.q.shape(), DType::F64), st = Tensor::empty({B, H, D, D}, DType::F64);
  Tensor lam = Tensor::empty({B, T, H}, DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> S(static_cast<size_t>(D * D), 0.0);
      if (in.state.defined())
        for (int64_t e = 0; e < D * D; ++e) S[size_t(e)] = in.state.data<double>()[(b * H + h) * D * D + e];
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = ((b * T + t) * H + h) * D, gate = (b * T + t) * H + h;
        const double decay = in.gk.defined() ? std::exp(in.gk.data<double>()[gate]) : 1.0;
        const double* k = in.k.data<double>() + row;
        double fro = 0;
        for (int64_t i = 0; i < D; ++i)
          for (int64_t j = 0; j < D; ++j) {
            double& s = S[size_t(i * D + j)];
            s = decay * s + k[i] * k[j];
            fro += s * s;
          }
        const double l = lambda.defined() ? lambda.data<double>()[gate] : ridge * std::sqrt(fro);
        lam.data<double>()[gate] = l;
        std::vector<double> A = S, rhs(in.q.data<double>() + row, in.q.data<double>() + row + D);
        for (int64_t i = 0; i < D; ++i) A[size_t(i * D + i)] += l;
        const std::vector<double> xt = dense_solve(A, rhs);
        for (int64_t i = 0; i < D; ++i) x.data<double>()[row + i] = xt[size_t(i)];
      }
      for (int64_t e = 0; e < D * D; ++e) st.data<double>()[(b * H + h) * D * D + e] = S[size_t(e)];
    }
  if (lambda_out) *lambda_out = lam;
  return {x, st};
}

// Per token, ‖x − x*‖ / ‖x*‖ over [B, T, H, D] tensors.
std::vector<double> token_errors(const Tensor& x, const Tensor& exact) {
  const int64_t D = x.size(-1), rows = x.numel() / D;
  const auto a = x.to_vector<double>(), b = exact.to_vector<double>();
  std::vector<double> err(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < D; ++i) {
      num += std::pow(a[size_t(r * D + i)] - b[size_t(r * D + i)], 2);
      den += std::pow(b[size_t(r * D + i)], 2);
    }
    err[size_t(r)] = std::sqrt(num / den);
  }
  return err;
}

TEST(ChebyshevSolve, ReferenceConvergesToTheExactSolveWithinTheChebyshevBound) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ChebyshevInputs in = test::chebyshev_inputs(2, 40, 2, 16, seed, true, true);
  const double ridge = 0.02;
  const Tensor exact = exact_solve(in, ridge, Tensor(), nullptr)[0];
  // The spectrum of H_t + λ_t I lies in [μ, L] = [a‖H‖_F, (1+a)‖H‖_F]: κ ≤ (1+a)/a. After r updates the iterate
  // is the optimal degree-(r+1) Chebyshev residual polynomial applied from x = 0, so
  // ‖x_r − x*‖_A ≤ 2 R_a^{r+1} ‖x*‖_A with R_a = (√κ−1)/(√κ+1), i.e. ‖x_r − x*‖ / ‖x*‖ ≤ 2√κ R_a^{r+1}.
  const double kappa = (1 + ridge) / ridge, Ra = (std::sqrt(kappa) - 1) / (std::sqrt(kappa) + 1);
  for (int64_t r : {1, 5, 10, 30}) {
    SCOPED_TRACE("num_iter " + std::to_string(r));
    const Tensor x = ops::reference::chebyshev_solve(in.q, in.k, in.gk, options(ridge, r), in.state, nullptr);
    const double bound = 2 * std::sqrt(kappa) * std::pow(Ra, double(r + 1)) + 1e-12;
    double worst = 0;
    for (double e : token_errors(x, exact)) worst = std::max(worst, e);
    EXPECT_LE(worst, bound);
    if (r == 30) {
      EXPECT_LT(worst, 1e-2);  // the paper's default is close to the exact regression
    }
  }
}

// T_n(z) by the three-term recurrence (valid for every real z).
double chebyshev_t(int64_t n, double z) {
  double prev = 1, cur = z;
  if (n == 0) return 1;
  for (int64_t i = 1; i < n; ++i) {
    const double next = 2 * z * cur - prev;
    prev = cur;
    cur = next;
  }
  return cur;
}

TEST(ChebyshevSolve, ReferenceIsTheOptimalChebyshevPolynomialWithOmegaZeroTwo) {
  // A diagonal state and a zero key give H = diag(e): in the eigenbasis the iterate after r updates must be
  // x_i = (1 − R(A_ii)) q_i / A_ii with A = H + λI and R(z) = T_{r+1}((L+μ−2z)/(L−μ)) / T_{r+1}((L+μ)/(L−μ)), the
  // optimal residual polynomial — which only ω_0 = 2 reproduces (ω_0 = 0, as Algorithm 1's box prints, does not).
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t D = 6;
  const double ridge = 0.05;
  const Tensor e = test::rand_uniform({D}, seed, 0.05, 1.0);
  Tensor state = Tensor::zeros({1, 1, D, D}, DType::F64);
  double fro = 0;
  for (int64_t i = 0; i < D; ++i) {
    state.data<double>()[i * D + i] = e.data<double>()[i];
    fro += std::pow(e.data<double>()[i], 2);
  }
  fro = std::sqrt(fro);
  const Tensor q = test::randn({1, 1, 1, D}, seed + 1), k = Tensor::zeros({1, 1, 1, D}, DType::F64);
  const double mu = ridge * fro, L = (1 + ridge) * fro;
  for (int64_t r : {1, 2, 5, 12}) {
    const Tensor x = ops::reference::chebyshev_solve(q, k, Tensor(), options(ridge, r), state, nullptr);
    for (int64_t i = 0; i < D; ++i) {
      const double a = e.data<double>()[i] + mu;
      const double R = chebyshev_t(r + 1, (L + mu - 2 * a) / (L - mu)) / chebyshev_t(r + 1, (L + mu) / (L - mu));
      EXPECT_NEAR(x.data<double>()[i], (1 - R) * q.data<double>()[i] / a, 1e-12) << "r " << r << " i " << i;
    }
  }
}

// Finite-difference check of the reference backward on the inputs that `wrt` names, through the outputs x and (if
// with_state_out) H_T, whose random weight is then the dstate_out that flows in.
void reference_gradcheck(const ChebyshevInputs& in, const ChebyshevOptions& o, bool with_state_out,
                         const std::vector<bool>& wrt, uint64_t seed) {
  test::GradCheck check;
  check.inputs = {in.q, in.k, in.gk, in.state};
  check.names = {"q", "k", "gk", "state_in"};
  check.forward = [&](const std::vector<Tensor>& v) {
    Tensor st;
    const Tensor x = ops::reference::chebyshev_solve(v[0], v[1], v[2], o, v[3], with_state_out ? &st : nullptr);
    return with_state_out ? std::vector<Tensor>{x, st} : std::vector<Tensor>{x};
  };
  check.backward = [&](const std::vector<Tensor>& v, const std::vector<Tensor>& g) {
    const Tensor x = ops::reference::chebyshev_solve(v[0], v[1], v[2], o, v[3], nullptr);
    const ChebyshevGrads gr =
        ops::reference::chebyshev_solve_backward(g[0], x, v[0], v[1], v[2], o, v[3], with_state_out ? g[1] : Tensor());
    std::vector<Tensor> out{gr.dq, gr.dk, gr.dgk, gr.dstate_in};
    for (size_t i = 0; i < out.size(); ++i)
      if (!wrt[i]) out[i] = Tensor();
    return out;
  };
  test::run_gradcheck(check, seed);
}

TEST(ChebyshevSolve, ReferenceGradientsMatchFiniteDifferencesWhenConverged) {
  // The backward is the gradient of the exact solve evaluated at the iterate: it equals the gradient of the
  // iteration only once the iteration has converged. A large ridge (κ ≤ (1+a)/a = 2.3, R_a = 0.21) and 60 updates
  // put the iteration error near 1e-40, far below the finite-difference tolerance.
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ChebyshevInputs in = test::chebyshev_inputs(1, 6, 2, 4, seed, true, true);
  for (bool with_state_out : {false, true}) {
    SCOPED_TRACE(with_state_out ? "with dstate_out" : "without dstate_out");
    reference_gradcheck(in, options(0.75, 60), with_state_out, {true, true, true, true}, seed);
  }
}

TEST(ChebyshevSolve, ReferenceGradientWithoutLambdaPathHoldsLambdaFixed) {
  // bp_lambda = false treats λ_t as a constant: its gradient is that of the exact solve with λ_t frozen at the
  // forward's values, which the test differentiates by finite differences through its own dense solve.
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ChebyshevInputs in = test::chebyshev_inputs(1, 6, 2, 4, seed, true, true);
  const ChebyshevOptions o = options(0.75, 60, false);
  Tensor lambda;
  exact_solve(in, o.ridge, Tensor(), &lambda);
  test::GradCheck check;
  check.inputs = {in.q, in.k, in.gk, in.state};
  check.names = {"q", "k", "gk", "state_in"};
  check.forward = [&](const std::vector<Tensor>& v) {
    return exact_solve({v[0], v[1], v[2], v[3]}, o.ridge, lambda, nullptr);
  };
  check.backward = [&](const std::vector<Tensor>& v, const std::vector<Tensor>& g) {
    const Tensor x = ops::reference::chebyshev_solve(v[0], v[1], v[2], o, v[3], nullptr);
    const ChebyshevGrads gr = ops::reference::chebyshev_solve_backward(g[0], x, v[0], v[1], v[2], o, v[3], g[1]);
    return std::vector<Tensor>{gr.dq, gr.dk, gr.dgk, gr.dstate_in};
  };
  test::run_gradcheck(check, seed);
}

TEST(ChebyshevSolve, ReferenceQueryGradientIsExactForAnyIterationCount) {
  // Lemma 2: x = p_r(A) q with p_r(A) symmetric, and L, μ depend on H only, so dq = CH(A, dx) is the exact gradient
  // of the r-step iteration, converged or not — at the default ridge too.
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ChebyshevInputs in = test::chebyshev_inputs(1, 7, 2, 6, seed, true, true);
  for (int64_t r : {1, 5, 30}) {
    SCOPED_TRACE("num_iter " + std::to_string(r));
    reference_gradcheck(in, options(0.02, r), true, {true, false, false, false}, seed);
  }
}

double sum_squares(const Tensor& t) {
  double s = 0;
  for (double v : t.to_vector<double>()) s += v * v;
  return s;
}

struct Case {
  int64_t T, num_iter;
  bool gk, state, bp_lambda;
  std::string name() const {
    return "T " + std::to_string(T) + " num_iter " + std::to_string(num_iter) + (gk ? " gk" : "") +
           (state ? " state_in" : "") + (bp_lambda ? " bp_lambda" : "");
  }
};

std::vector<Case> sweep() {
  std::vector<Case> cases;
  for (int64_t T : {1, 5, 64, 100, 200})
    for (int64_t r : {0, 1, 5, 30})
      for (bool gk : {false, true})
        for (bool state : {false, true}) cases.push_back({T, r, gk, state, (T + r) % 2 == 0});
  return cases;
}

// The chunked CPU path in `dtype` against the reference on the same f64 inputs: forward x and H_T, backward with a
// random dx and dstate_out. rel_x bounds x and H_T; rel_grad the gradients.
void expect_chunked_matches_reference(const Case& c, DType dtype, double rel_x, double rel_grad, uint64_t seed) {
  SCOPED_TRACE(c.name());
  const int64_t B = 2, H = 2, D = 16;
  const ChebyshevInputs in = test::chebyshev_inputs(B, c.T, H, D, seed, c.gk, c.state);
  const ChebyshevOptions o = options(0.02, c.num_iter, c.bp_lambda);
  const Tensor dx = test::randn(in.q.shape(), seed + 11), dst = test::randn({B, H, D, D}, seed + 12);

  Tensor st_ref, st;
  const Tensor x_ref = ops::reference::chebyshev_solve(in.q, in.k, in.gk, o, in.state, &st_ref);
  const ChebyshevGrads g_ref = ops::reference::chebyshev_solve_backward(dx, x_ref, in.q, in.k, in.gk, o, in.state, dst);

  const Tensor q = in.q.to(dtype), k = in.k.to(dtype), gk = to_dtype(in.gk, dtype), s0 = to_dtype(in.state, dtype);
  const Tensor x = ops::chebyshev_solve(q, k, gk, o, s0, &st);
  ASSERT_EQ(x.dtype(), dtype);
  ASSERT_EQ(st.dtype(), dtype);
  const ChebyshevGrads g = ops::chebyshev_solve_backward(dx.to(dtype), x, q, k, gk, o, s0, dst.to(dtype));
  // With no state and a single token, H_0 = 0 and dgk is exactly 0 while its chunked form sums terms that cancel:
  // relative to the size of those terms (|dgk_t| is a few k_t·dk_t), not to 0.
  const double inf = 1e300;
  test::expect_close(x, x_ref, rel_x, inf, "x");
  test::expect_close(st, st_ref, rel_x, inf, "state_out");
  test::expect_close(g.dq, g_ref.dq, rel_grad, inf, "dq");
  test::expect_close(g.dk, g_ref.dk, rel_grad, inf, "dk");
  ASSERT_EQ(g.dgk.defined(), c.gk);
  if (c.gk) {
    const test::Diff e = test::compare(g.dgk, g_ref.dgk);
    const double scale = std::max(std::sqrt(sum_squares(g_ref.dgk)), std::sqrt(sum_squares(g_ref.dk)));
    EXPECT_EQ(e.nonfinite, 0) << "dgk";
    EXPECT_LE(e.rel_l2 * std::sqrt(sum_squares(g_ref.dgk)), rel_grad * scale) << "dgk: max abs error " << e.max_abs;
  }
  ASSERT_EQ(g.dstate_in.defined(), c.state);
  if (c.state) test::expect_close(g.dstate_in, g_ref.dstate_in, rel_grad, inf, "dstate_in");
  if (c.num_iter == 0) {
    test::expect_close(x, q, 0, 0, "x = q when num_iter = 0");
    test::expect_close(g.dq, dx.to(dtype), 0, 0, "dq = dx when num_iter = 0");
  }
}

TEST(ChebyshevSolve, ChunkedF64MatchesReference) {
  // Same maths, different association (chunk-start states, Eq. (5), closed-form masks): only f64 rounding differs,
  // amplified by at most κ ≤ 51 and the iteration's momentum.
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Case& c : sweep()) expect_chunked_matches_reference(c, DType::F64, 1e-11, 1e-11, seed);
}

TEST(ChebyshevSolve, ChunkedF32MatchesReference) {
  // f32 rounds every product and sum at 2^-24 ≈ 6e-8; the solve amplifies a perturbation of H_t + λ_t I by up to
  // κ ≤ 51: ~3e-6 for x, 1e-5 with room for the sums over D and the chunk. The gradients add a second solve and
  // sums whose terms cancel (the A-part, B-part and cross-chunk parts of dk; the parts of dgk): 2e-4.
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Case& c : sweep()) expect_chunked_matches_reference(c, DType::F32, 1e-5, 2e-4, seed);
}

TEST(ChebyshevSolve, ChunkedCallsChainThroughTheState) {
  // [x1; x2] in one call equals x1, then x2 from x1's final state — split inside a chunk; and the backward of the
  // second call's dstate_in, fed to the first call as dstate_out, reproduces the one-call gradients.
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T = 150, T1 = 70, H = 2, D = 8;
  const ChebyshevInputs in = test::chebyshev_inputs(B, T, H, D, seed, true, true);
  const ChebyshevOptions o = options(0.02, 10);
  const Tensor dx = test::randn(in.q.shape(), seed + 11), dst = test::randn({B, H, D, D}, seed + 12);
  auto part = [](const Tensor& t, int64_t a, int64_t b) { return t.slice(1, a, b).contiguous(); };

  Tensor st, st1, st2;
  const Tensor x = ops::chebyshev_solve(in.q, in.k, in.gk, o, in.state, &st);
  const Tensor x1 = ops::chebyshev_solve(part(in.q, 0, T1), part(in.k, 0, T1), part(in.gk, 0, T1), o, in.state, &st1);
  const Tensor x2 = ops::chebyshev_solve(part(in.q, T1, T), part(in.k, T1, T), part(in.gk, T1, T), o, st1, &st2);
  test::expect_close(x1, part(x, 0, T1), 1e-12, 1e300, "x1");
  test::expect_close(x2, part(x, T1, T), 1e-12, 1e300, "x2");
  test::expect_close(st2, st, 1e-12, 1e300, "state_out");

  const ChebyshevGrads g = ops::chebyshev_solve_backward(dx, x, in.q, in.k, in.gk, o, in.state, dst);
  const ChebyshevGrads g2 = ops::chebyshev_solve_backward(part(dx, T1, T), x2, part(in.q, T1, T), part(in.k, T1, T),
                                                          part(in.gk, T1, T), o, st1, dst);
  const ChebyshevGrads g1 = ops::chebyshev_solve_backward(part(dx, 0, T1), x1, part(in.q, 0, T1), part(in.k, 0, T1),
                                                          part(in.gk, 0, T1), o, in.state, g2.dstate_in);
  test::expect_close(g1.dq, part(g.dq, 0, T1), 1e-12, 1e300, "dq part 1");
  test::expect_close(g2.dq, part(g.dq, T1, T), 1e-12, 1e300, "dq part 2");
  test::expect_close(g1.dk, part(g.dk, 0, T1), 1e-11, 1e300, "dk part 1");
  test::expect_close(g2.dk, part(g.dk, T1, T), 1e-11, 1e300, "dk part 2");
  test::expect_close(g1.dgk, part(g.dgk, 0, T1), 1e-11, 1e300, "dgk part 1");
  test::expect_close(g2.dgk, part(g.dgk, T1, T), 1e-11, 1e300, "dgk part 2");
  test::expect_close(g1.dstate_in, g.dstate_in, 1e-11, 1e300, "dstate_in");
}

// Chunk-start states pass from the forward to the backward on CUDA only (test_chebyshev_solve_cuda.cpp): the CPU
// paths recompute them, hand none over and refuse any.
TEST(ChebyshevSolve, CpuKeepsNoChunkStates) {
  const ChebyshevInputs in = test::chebyshev_inputs(1, 3, 2, 4, 1, true, true);
  Tensor chunk_states;
  const Tensor x = ops::chebyshev_solve(in.q, in.k, in.gk, options(0.02, 5), in.state, nullptr, &chunk_states);
  EXPECT_FALSE(chunk_states.defined());
  test::expect_error(
      [&] {
        ops::chebyshev_solve_backward(x, x, in.q, in.k, in.gk, options(0.02, 5), in.state, Tensor(),
                                      Tensor::zeros({2, 2, 4, 4}, DType::F32));
      },
      {"chebyshev_solve_backward", "CUDA forward"});
}

TEST(ChebyshevSolve, RejectsBadArguments) {
  const ChebyshevInputs in = test::chebyshev_inputs(1, 3, 2, 4, 1, true, true);
  test::expect_error([&] { ops::chebyshev_solve(in.q, in.k, in.gk, options(0.0, 5), in.state, nullptr); },
                     {"chebyshev_solve", "ridge is 0"});
  test::expect_error([&] { ops::chebyshev_solve(in.q, in.k, in.gk, options(0.02, -1), in.state, nullptr); },
                     {"chebyshev_solve", "num_iter is -1"});
  test::expect_error(
      [&] { ops::chebyshev_solve(in.q, in.k.slice(1, 0, 2), in.gk, options(0.02, 5), in.state, nullptr); },
      {"chebyshev_solve", "'k'", "[1, 3, 2, 4]"});
  test::expect_error(
      [&] { ops::chebyshev_solve(in.q, in.k, in.gk.to(DType::F32), options(0.02, 5), in.state, nullptr); },
      {"chebyshev_solve", "'gk'", "f64"});
  test::expect_error(
      [&] { ops::chebyshev_solve(in.q, in.k, in.gk, options(0.02, 5), in.state.slice(2, 0, 2), nullptr); },
      {"chebyshev_solve", "'state_in'", "[1, 2, 4, 4]"});
  test::expect_error(
      [&] {
        ops::reference::chebyshev_solve(in.q.to(DType::F32), in.k.to(DType::F32), Tensor(), options(0.02, 5), Tensor(),
                                        nullptr);
      },
      {"reference::chebyshev_solve", "f64"});
}

}  // namespace
}  // namespace primer
