// The gated delta rule on the CPU: the f64 token-by-token reference (defining properties of the recurrence, its
// hand-written backward against finite differences for every input, the initial state and a final-state
// gradient), the chunked algorithm in f64 and f32 against it across chunk boundaries, state chaining through the
// autograd node, and argument errors.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/functions.h"
#include "core/autograd/gated_delta_rule.h"
#include "core/ops/gated_delta_rule.h"
#include "tests/support/gated_delta_inputs.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using test::GatedDeltaInputs;

// Gradient check of the reference with outputs {o, S_T} (weights on both, so dstate_out flows in) or {o} alone.
void check_reference_gradients(const GatedDeltaInputs& in, bool with_state, uint64_t seed) {
  const double scale = 0.7;
  test::GradCheck check;
  check.inputs = {in.q, in.k, in.v, in.g, in.beta};
  check.names = {"q", "k", "v", "g", "beta"};
  if (with_state) {
    check.inputs.push_back(in.state);
    check.names.push_back("state_in");
  }
  auto state_of = [&](const std::vector<Tensor>& x) { return with_state ? x[5] : Tensor(); };
  check.forward = [&](const std::vector<Tensor>& x) {
    Tensor st;
    Tensor o =
        ops::reference::gated_delta_rule(x[0], x[1], x[2], x[3], x[4], scale, state_of(x), with_state ? &st : nullptr);
    return with_state ? std::vector<Tensor>{o, st} : std::vector<Tensor>{o};
  };
  check.backward = [&](const std::vector<Tensor>& x, const std::vector<Tensor>& dy) {
    const ops::GatedDeltaGrads d = ops::reference::gated_delta_rule_backward(
        dy[0], x[0], x[1], x[2], x[3], x[4], scale, state_of(x), with_state ? dy[1] : Tensor());
    std::vector<Tensor> out{d.dq, d.dk, d.dv, d.dg, d.dbeta};
    if (with_state) out.push_back(d.dstate_in);
    return out;
  };
  test::run_gradcheck(check, seed);
}

TEST(GatedDeltaRuleReference, BackwardMatchesFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (double beta_max : {1.0, 2.0}) {  // 2: negative eigenvalues of the transition allowed
    SCOPED_TRACE("beta_max " + std::to_string(beta_max));
    const GatedDeltaInputs in = test::gated_delta_inputs(2, 5, 2, 3, 4, seed, beta_max);
    check_reference_gradients(in, true, seed);
    check_reference_gradients(in, false, seed + 1);
  }
}

// Grouped-query keys and values (k, v with Hk of q's H heads): head h reads key/value head h / (H / Hk). The
// reference's backward against finite differences (each group's gradient is the sum over its heads), its values
// against the same inputs with k and v repeated to every head by hand, and the chunked f64 path against both.
TEST(GatedDeltaRuleReference, GroupedKeysAndValuesAreSharedByTheirHeads) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T = 5, H = 4, Hk = 2, K = 3, V = 4;
  GatedDeltaInputs in = test::gated_delta_inputs(B, T, H, K, V, seed);
  in.k = in.k.slice(2, 0, Hk).contiguous();
  in.v = in.v.slice(2, 0, Hk).contiguous();
  check_reference_gradients(in, true, seed);

  auto repeated = [&](const Tensor& t) {  // [B, T, Hk, D] → [B, T, H, D], head h holding h / (H / Hk)
    const int64_t D = t.size(3);
    const std::vector<double> x = t.to_vector<double>();
    std::vector<double> y(size_t(B * T * H * D));
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D; ++i) y[size_t((bt * H + h) * D + i)] = x[size_t((bt * Hk + h / (H / Hk)) * D + i)];
    return Tensor::from_vector(y, {B, T, H, D}, DType::F64);
  };
  Tensor st_grouped, st_repeated, st_chunked;
  const Tensor grouped = ops::reference::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, 0.7, in.state, &st_grouped);
  const Tensor by_hand = ops::reference::gated_delta_rule(in.q, repeated(in.k), repeated(in.v), in.g, in.beta, 0.7,
                                                          in.state, &st_repeated);
  test::expect_close(grouped, by_hand, 1e-15, 1e-15, "o");
  test::expect_close(st_grouped, st_repeated, 1e-15, 1e-15, "state_out");
  const Tensor chunked = ops::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, 0.7, in.state, &st_chunked);
  test::expect_close(chunked, grouped, 1e-12, 1.0, "chunked o");
  test::expect_close(st_chunked, st_grouped, 1e-12, 1.0, "chunked state_out");
  const Tensor dout = test::randn({B, T, H, V}, seed + 11);
  const ops::GatedDeltaGrads r =
      ops::reference::gated_delta_rule_backward(dout, in.q, in.k, in.v, in.g, in.beta, 0.7, in.state, Tensor());
  const ops::GatedDeltaGrads d =
      ops::gated_delta_rule_backward(dout, in.q, in.k, in.v, in.g, in.beta, 0.7, in.state, Tensor());
  EXPECT_EQ(d.dk.shape(), in.k.shape());
  EXPECT_EQ(d.dv.shape(), in.v.shape());
  test::expect_close(d.dk, r.dk, 1e-12, 1.0, "chunked dk");
  test::expect_close(d.dv, r.dv, 1e-12, 1.0, "chunked dv");
}

// Properties that pin the reference to the recurrence itself rather than to its own backward: with β = 1 the state
// returns exactly v for the key just written (the delta rule's correction); with β = 0 it only decays by e^g.
TEST(GatedDeltaRuleReference, WritesRetrievableValuesAndDecays) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t K = 5, V = 3;
  GatedDeltaInputs in = test::gated_delta_inputs(1, 1, 1, K, V, seed);
  for (double beta : {1.0, 0.0}) {
    const Tensor b = Tensor::full({1, 1, 1}, beta, DType::F64);
    Tensor st;
    ops::reference::gated_delta_rule(in.k, in.k, in.v, in.g, b, 1.0, in.state, &st);
    const auto S = st.to_vector<double>(), S0 = in.state.to_vector<double>(), k = in.k.to_vector<double>(),
               v = in.v.to_vector<double>();
    const double decay = std::exp(in.g.to_vector<double>()[0]);
    if (beta == 1.0) {
      for (int64_t j = 0; j < V; ++j) {
        double read = 0;
        for (int64_t i = 0; i < K; ++i) read += S[size_t(i * V + j)] * k[size_t(i)];
        EXPECT_NEAR(read, v[size_t(j)], 1e-13);
      }
    } else {
      for (size_t e = 0; e < S.size(); ++e) EXPECT_NEAR(S[e], decay * S0[e], 1e-15);
    }
  }
}

struct ChunkCase {
  int64_t T;
  bool with_state;
  double beta_max;
};
std::string case_name(const ::testing::TestParamInfo<ChunkCase>& i) {
  return "T" + std::to_string(i.param.T) + (i.param.with_state ? "_state" : "_nostate") +
         (i.param.beta_max > 1 ? "_negeig" : "");
}

class GatedDeltaRuleChunked : public ::testing::TestWithParam<ChunkCase> {};

// Forward (o and S_T) and every gradient of the chunked path in `dtype` against the f64 reference on the same
// inputs, with a random final-state gradient.
void compare_chunked(const ChunkCase& c, DType dtype, double rel_out, double rel_grad, uint64_t seed) {
  const int64_t B = 2, H = 2, K = 16, V = 12;
  const double scale = 1.0 / std::sqrt(double(K));
  const GatedDeltaInputs in = test::gated_delta_inputs(B, c.T, H, K, V, seed, c.beta_max);
  const Tensor state = c.with_state ? in.state : Tensor();
  const Tensor dout = test::randn({B, c.T, H, V}, seed + 11), dstate = test::randn({B, H, K, V}, seed + 12);
  auto as = [&](const Tensor& t) { return t.defined() ? t.to(dtype) : Tensor(); };

  Tensor ref_state, state_out;
  const Tensor ref = ops::reference::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, scale, state, &ref_state);
  const Tensor o =
      ops::gated_delta_rule(as(in.q), as(in.k), as(in.v), as(in.g), as(in.beta), scale, as(state), &state_out);
  EXPECT_EQ(o.dtype(), dtype);
  EXPECT_EQ(state_out.dtype(), dtype);
  test::expect_close(o, ref, rel_out, 1.0, "o");
  test::expect_close(state_out, ref_state, rel_out, 1.0, "state_out");

  const ops::GatedDeltaGrads r =
      ops::reference::gated_delta_rule_backward(dout, in.q, in.k, in.v, in.g, in.beta, scale, state, dstate);
  const ops::GatedDeltaGrads d = ops::gated_delta_rule_backward(as(dout), as(in.q), as(in.k), as(in.v), as(in.g),
                                                                as(in.beta), scale, as(state), as(dstate));
  test::expect_close(d.dq, r.dq, rel_grad, 1.0, "dq");
  test::expect_close(d.dk, r.dk, rel_grad, 1.0, "dk");
  test::expect_close(d.dv, r.dv, rel_grad, 1.0, "dv");
  test::expect_close(d.dg, r.dg, rel_grad, 1.0, "dg");
  test::expect_close(d.dbeta, r.dbeta, rel_grad, 1.0, "dbeta");
  ASSERT_EQ(d.dstate_in.defined(), c.with_state);
  if (c.with_state) test::expect_close(d.dstate_in, r.dstate_in, rel_grad, 1.0, "dstate_in");
}

TEST_P(GatedDeltaRuleChunked, F64MatchesTheReference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // The same maths reassociated (chunk products, the triangular inverse): f64 rounding only.
  compare_chunked(GetParam(), DType::F64, 1e-12, 1e-12, seed);
}

TEST_P(GatedDeltaRuleChunked, F32MatchesTheReference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // f32 rounds every product and sum at 2^-24 ≈ 6e-8 relative; dot products of ≤ 64 terms, the triangular solve
  // and T/64 chained chunk updates grow that to ~1e-6 (measured ≤ 1.1e-6 for o and S_T). The backward goes through
  // the inverse twice (−Aᵀ dA Aᵀ) and sums many signed terms into dg and dβ (measured ≤ 2.5e-6).
  compare_chunked(GetParam(), DType::F32, 1e-5, 3e-5, seed);
}

INSTANTIATE_TEST_SUITE_P(Lengths, GatedDeltaRuleChunked,
                         ::testing::Values(ChunkCase{1, true, 1.0}, ChunkCase{5, false, 1.0}, ChunkCase{64, true, 1.0},
                                           ChunkCase{100, false, 2.0}, ChunkCase{100, true, 1.0},
                                           ChunkCase{200, true, 2.0}, ChunkCase{200, false, 1.0}),
                         case_name);

// Running [x1; x2] at once equals x1 then x2 from x1's final state, in value and in every gradient: through the
// autograd node, the second call's state gradient flows back into the first call's state_out.
TEST(GatedDeltaRule, ChainingCarriesTheStateAndItsGradient) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T1 = 70, T2 = 45, H = 2, K = 8, V = 6;
  const double scale = 0.35;
  const GatedDeltaInputs in = test::gated_delta_inputs(B, T1 + T2, H, K, V, seed);
  const Tensor R = test::randn({B, T1 + T2, H, V}, seed + 1), Rs = test::randn({B, H, K, V}, seed + 2);
  const std::vector<Tensor> whole{in.q, in.k, in.v, in.g, in.beta};

  Tensor full_state;
  const Tensor full = ops::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, scale, in.state, &full_state);
  const ops::GatedDeltaGrads fg =
      ops::gated_delta_rule_backward(R, in.q, in.k, in.v, in.g, in.beta, scale, in.state, Rs);

  std::vector<ag::Var> x1, x2;
  for (const Tensor& t : whole) {
    x1.push_back(ag::leaf(t.slice(1, 0, T1).contiguous()));
    x2.push_back(ag::leaf(t.slice(1, T1, T1 + T2).contiguous()));
  }
  const ag::Var s0 = ag::leaf(in.state);
  ag::Var s1, s2;
  const ag::Var o1 = ag::gated_delta_rule(x1[0], x1[1], x1[2], x1[3], x1[4], scale, s0, &s1);
  const ag::Var o2 = ag::gated_delta_rule(x2[0], x2[1], x2[2], x2[3], x2[4], scale, s1, &s2);
  test::expect_close(o1->value, full.slice(1, 0, T1), 1e-13, 1e-12, "o, first part");
  test::expect_close(o2->value, full.slice(1, T1, T1 + T2), 1e-13, 1e-12, "o, second part");
  test::expect_close(s2->value, full_state, 1e-13, 1e-12, "final state");

  o1->grad = R.slice(1, 0, T1).contiguous();
  o2->grad = R.slice(1, T1, T1 + T2).contiguous();
  s2->grad = Rs;
  ag::current_tape().backward();
  const Tensor fgrads[] = {fg.dq, fg.dk, fg.dv, fg.dg, fg.dbeta};
  const char* names[] = {"dq", "dk", "dv", "dg", "dbeta"};
  for (size_t i = 0; i < 5; ++i) {
    test::expect_close(x1[i]->grad, fgrads[i].slice(1, 0, T1), 1e-12, 1e-11, std::string(names[i]) + ", first part");
    test::expect_close(x2[i]->grad, fgrads[i].slice(1, T1, T1 + T2), 1e-12, 1e-11,
                       std::string(names[i]) + ", second part");
  }
  test::expect_close(s0->grad, fg.dstate_in, 1e-12, 1e-11, "dstate_in");
}

TEST(GatedDeltaRule, RejectsBadArguments) {
  const GatedDeltaInputs in = test::gated_delta_inputs(1, 3, 2, 4, 4, 1);
  test::expect_error(
      [&] {
        ops::gated_delta_rule(in.q, in.k, in.v, in.g.reshape({1, 6}), in.beta, 1.0, Tensor(), nullptr);
      },
      {"gated_delta_rule", "'g'"});
  test::expect_error(
      [&] { ops::gated_delta_rule(in.q, in.k, in.v.to(DType::F32), in.g, in.beta, 1.0, Tensor(), nullptr); },
      {"gated_delta_rule", "'v'"});
  test::expect_error(
      [&] {
        ops::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, 1.0, in.state.reshape({2, 4, 4}), nullptr);
      },
      {"gated_delta_rule", "'state_in'"});
  const GatedDeltaInputs three_heads = test::gated_delta_inputs(1, 3, 3, 4, 4, 2);  // 3 does not divide q's 2
  test::expect_error(
      [&] { ops::gated_delta_rule(in.q, three_heads.k, three_heads.v, in.g, in.beta, 1.0, Tensor(), nullptr); },
      {"gated_delta_rule", "'k'", "dividing"});
  test::expect_error(
      [&] {
        ops::gated_delta_rule(in.q, in.k, in.v.slice(2, 0, 1).contiguous(), in.g, in.beta, 1.0, Tensor(), nullptr);
      },
      {"gated_delta_rule", "'v'", "as k"});
  test::expect_error(
      [&] {
        ops::reference::gated_delta_rule(in.q.to(DType::F32), in.k.to(DType::F32), in.v.to(DType::F32),
                                         in.g.to(DType::F32), in.beta.to(DType::F32), 1.0, Tensor(), nullptr);
      },
      {"reference", "f64"});
}

}  // namespace
}  // namespace primer
