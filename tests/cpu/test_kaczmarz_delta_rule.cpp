// Kaczmarz linear attention's core on the CPU: the f64 token-by-token reference (its hand-written backward, key-norm
// path included, against finite differences; the paper's Theorem 1 and Proposition 2 as properties of the
// recurrence), and the implementation that runs (unit keys and scaled values through the gated delta rule's chunked
// path, ag::kaczmarz_delta_rule) against the reference in f64 and f32, forward and every gradient, across chunk
// boundaries and at head dims 64 and 128.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/kaczmarz_delta_rule.h"
#include "core/ops/kaczmarz_delta_rule.h"
#include "core/ops/key_norm_scale.h"
#include "tests/support/kaczmarz_inputs.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using test::KaczmarzInputs;
constexpr double kEps = 1e-6;  // the paper's ε

void check_reference_gradients(const KaczmarzInputs& in, bool with_state, uint64_t seed) {
  const double scale = 0.7;
  test::GradCheck check;
  check.inputs = {in.q, in.k, in.v, in.g, in.eta};
  check.names = {"q", "k", "v", "g", "eta"};
  if (with_state) {
    check.inputs.push_back(in.state);
    check.names.push_back("state_in");
  }
  auto state_of = [&](const std::vector<Tensor>& x) { return with_state ? x[5] : Tensor(); };
  check.forward = [&](const std::vector<Tensor>& x) {
    Tensor st;
    Tensor o = ops::reference::kaczmarz_delta_rule(x[0], x[1], x[2], x[3], x[4], scale, kEps, state_of(x),
                                                   with_state ? &st : nullptr);
    return with_state ? std::vector<Tensor>{o, st} : std::vector<Tensor>{o};
  };
  check.backward = [&](const std::vector<Tensor>& x, const std::vector<Tensor>& dy) {
    const ops::KaczmarzDeltaGrads d = ops::reference::kaczmarz_delta_rule_backward(
        dy[0], x[0], x[1], x[2], x[3], x[4], scale, kEps, state_of(x), with_state ? dy[1] : Tensor());
    std::vector<Tensor> out{d.dq, d.dk, d.dv, d.dg, d.deta};
    if (with_state) out.push_back(d.dstate_in);
    return out;
  };
  test::run_gradcheck(check, seed);
}

TEST(KaczmarzDeltaRuleReference, BackwardMatchesFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const KaczmarzInputs in = test::kaczmarz_inputs(2, 5, 2, 3, 4, seed);
  check_reference_gradients(in, true, seed);
  check_reference_gradients(in, false, seed + 1);
}

// The paper's Theorem 1 (η = 1, ε = 0: the new state reads back exactly v_t for k_t, whatever ‖k_t‖) and
// Proposition 2 (residual contraction: v − S_tᵀk = (1 − η‖k‖²/(‖k‖² + ε)) (v − S'_tᵀk)).
TEST(KaczmarzDeltaRuleReference, ProjectsOntoTheKeyConstraint) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t K = 5, V = 3;
  const KaczmarzInputs in = test::kaczmarz_inputs(1, 1, 1, K, V, seed);
  const auto S0 = in.state.to_vector<double>(), k = in.k.to_vector<double>(), v = in.v.to_vector<double>();
  const double decay = std::exp(in.g.to_vector<double>()[0]), eta = in.eta.to_vector<double>()[0];
  double n = 0;
  for (double x : k) n += x * x;
  for (const auto& [eta_used, eps] : {std::pair{1.0, 0.0}, std::pair{eta, kEps}, std::pair{eta, 0.3}}) {
    Tensor st;
    ops::reference::kaczmarz_delta_rule(in.q, in.k, in.v, in.g, Tensor::full({1, 1, 1}, eta_used, DType::F64), 1.0, eps,
                                        in.state, &st);
    const auto S = st.to_vector<double>();
    const double factor = 1 - eta_used * n / (n + eps);
    for (int64_t j = 0; j < V; ++j) {
      double before = 0, after = 0;
      for (int64_t i = 0; i < K; ++i) {
        before += decay * S0[size_t(i * V + j)] * k[size_t(i)];
        after += S[size_t(i * V + j)] * k[size_t(i)];
      }
      EXPECT_NEAR(v[size_t(j)] - after, factor * (v[size_t(j)] - before), 1e-12 * (1 + std::abs(v[size_t(j)] - before)))
          << "eta " << eta_used << " eps " << eps << " column " << j;
    }
  }
}

// The fused key-norm scaling: its backward against finite differences (a zero key row included: r = ε^(−1/2) there,
// finite), and f32 against f64 on the same inputs.
TEST(KeyNormScale, BackwardMatchesFiniteDifferencesAndF32TracksF64) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const double eps = 0.01;  // large enough that a perturbation of the zero row stays well inside r's smooth range
  Tensor k = test::randn({2, 3, 5}, seed), v = test::randn({2, 3, 4}, seed + 1);
  for (int64_t i = 0; i < 5; ++i) k.data<double>()[i] = 0;
  test::GradCheck check;
  check.inputs = {k, v};
  check.names = {"k", "v"};
  check.forward = [&](const std::vector<Tensor>& x) {
    const ops::KeyNormScaled s = ops::key_norm_scale(x[0], x[1], eps);
    return std::vector<Tensor>{s.k, s.v};
  };
  check.backward = [&](const std::vector<Tensor>& x, const std::vector<Tensor>& dy) {
    const ops::KeyNormScaled s = ops::key_norm_scale(x[0], x[1], eps);
    const ops::KeyNormScaleGrads d = ops::key_norm_scale_backward(dy[0], dy[1], x[0], x[1], s.r);
    return std::vector<Tensor>{d.dk, d.dv};
  };
  test::run_gradcheck(check, seed);
  const ops::KeyNormScaled wide = ops::key_norm_scale(k, v, kEps),
                           narrow = ops::key_norm_scale(k.to(DType::F32), v.to(DType::F32), kEps);
  // One f32 rounding of r and of each product (2^-24 each).
  test::expect_close(narrow.k, wide.k, 1e-7, 1e-6, "k_hat");
  test::expect_close(narrow.v, wide.v, 1e-7, 1e-3, "v_hat");  // the zero key's row scales v by ε^(−1/2) = 1000
}

struct Case {
  int64_t T, head_dim;
  bool with_state;
};
std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  return "T" + std::to_string(i.param.T) + "_D" + std::to_string(i.param.head_dim) +
         (i.param.with_state ? "_state" : "_nostate");
}

class KaczmarzDeltaRule : public ::testing::TestWithParam<Case> {};

// ag::kaczmarz_delta_rule in `dtype` (q, k, v, g, η, state all in it) against the reference: o, S_T and the
// gradients of <dout, o> + <dstate, S_T> for every input.
void compare_with_reference(const Case& c, DType dtype, double rel_out, double rel_grad, uint64_t seed) {
  const int64_t B = 2, H = 2, K = c.head_dim, V = c.head_dim;
  const double scale = 1.0 / std::sqrt(double(K));
  const KaczmarzInputs in = test::kaczmarz_inputs(B, c.T, H, K, V, seed);
  const Tensor state = c.with_state ? in.state : Tensor();
  const Tensor dout = test::randn({B, c.T, H, V}, seed + 11), dstate = test::randn({B, H, K, V}, seed + 12);

  Tensor ref_state;
  const Tensor ref =
      ops::reference::kaczmarz_delta_rule(in.q, in.k, in.v, in.g, in.eta, scale, kEps, state, &ref_state);
  const ops::KaczmarzDeltaGrads r =
      ops::reference::kaczmarz_delta_rule_backward(dout, in.q, in.k, in.v, in.g, in.eta, scale, kEps, state, dstate);

  std::vector<ag::Var> x;
  for (const Tensor& t : {in.q, in.k, in.v, in.g, in.eta}) x.push_back(ag::leaf(t.to(dtype)));
  const ag::Var s0 = c.with_state ? ag::leaf(state.to(dtype)) : nullptr;
  ag::Var st;
  const ag::Var o = ag::kaczmarz_delta_rule(x[0], x[1], x[2], x[3], x[4], scale, kEps, s0, &st);
  EXPECT_EQ(o->value.dtype(), dtype);
  test::expect_close(o->value, ref, rel_out, 1.0, "o");
  test::expect_close(st->value, ref_state, rel_out, 1.0, "state_out");
  o->grad = dout.to(dtype);
  st->grad = dstate.to(dtype);
  ag::current_tape().backward();
  const Tensor expected[] = {r.dq, r.dk, r.dv, r.dg, r.deta};
  const char* names[] = {"dq", "dk", "dv", "dg", "deta"};
  for (size_t i = 0; i < 5; ++i) test::expect_close(x[i]->grad, expected[i], rel_grad, 1.0, names[i]);
  if (c.with_state) test::expect_close(s0->grad, r.dstate_in, rel_grad, 1.0, "dstate_in");
}

TEST_P(KaczmarzDeltaRule, F64MatchesTheReference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // The identity is exact; the chunked path reassociates (chunk products, the triangular inverse): f64 rounding.
  compare_with_reference(GetParam(), DType::F64, 1e-12, 1e-12, seed);
}

TEST_P(KaczmarzDeltaRule, F32MatchesTheReference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // The gated delta rule's f32 chunked path on unit-bounded keys (its own bounds: 1e-5 forward, 3e-5 backward), plus
  // the key-norm scaling r = (‖k‖² + ε)^(−1/2) rounded once in f32 on the way in and its chain rule on the way out.
  compare_with_reference(GetParam(), DType::F32, 1e-5, 3e-5, seed);
}

INSTANTIATE_TEST_SUITE_P(Lengths, KaczmarzDeltaRule,
                         ::testing::Values(Case{1, 64, true}, Case{7, 64, false}, Case{100, 64, true},
                                           Case{130, 64, false}, Case{67, 128, true}, Case{130, 128, true}),
                         case_name);

}  // namespace
}  // namespace primer
