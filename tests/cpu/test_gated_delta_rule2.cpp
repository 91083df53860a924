// The gated delta rule-2 (Gated DeltaNet-2's core) on the CPU: the f64 token-by-token reference (its hand-written
// backward against finite differences for every input, the initial state and a final-state gradient; against the
// paper's own chunkwise forward and backward (App. A, B) run in plain Python on a fixed case; the paper's
// reductions — b = w = β·1 with a scalar decay is Gated DeltaNet, checked against primer's independent GDN reference,
// and ∂L/∂β = ⟨∂L/∂b, 1⟩ + ⟨∂L/∂w, 1⟩; the erase's eigenvalue 1 − Σ b k² along k), the chunked path in f64 and f32
// against it across chunk boundaries (T ∈ {1, odd, not a multiple of 64, ≥ 2 chunks}, head dims 64 and 128, strong
// decay), state chaining through the autograd node, and argument errors.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/functions.h"
#include "core/autograd/gated_delta_rule2.h"
#include "core/ops/gated_delta_rule.h"
#include "core/ops/gated_delta_rule2.h"
#include "tests/support/gdn2_inputs.h"
#include "tests/support/gdn2_oracle_case.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using Inputs = test::Gdn2Inputs;
using test::gdn2_inputs;
using test::sigmoid_of_normal;

// Gradient check of the reference with outputs {o, S_T} (weights on both, so dstate_out flows in) or {o} alone.
void check_reference_gradients(const Inputs& in, bool with_state, uint64_t seed) {
  const double scale = 0.7;
  test::GradCheck check;
  check.inputs = {in.q, in.k, in.v, in.g, in.b, in.w};
  check.names = {"q", "k", "v", "g", "b", "w"};
  if (with_state) {
    check.inputs.push_back(in.state);
    check.names.push_back("state_in");
  }
  auto state_of = [&](const std::vector<Tensor>& x) { return with_state ? x[6] : Tensor(); };
  check.forward = [&](const std::vector<Tensor>& x) {
    Tensor st;
    Tensor o = ops::reference::gated_delta_rule2(x[0], x[1], x[2], x[3], x[4], x[5], scale, state_of(x),
                                                 with_state ? &st : nullptr);
    return with_state ? std::vector<Tensor>{o, st} : std::vector<Tensor>{o};
  };
  check.backward = [&](const std::vector<Tensor>& x, const std::vector<Tensor>& dy) {
    const ops::GatedDelta2Grads d = ops::reference::gated_delta_rule2_backward(
        dy[0], x[0], x[1], x[2], x[3], x[4], x[5], scale, state_of(x), with_state ? dy[1] : Tensor());
    std::vector<Tensor> out{d.dq, d.dk, d.dv, d.dg, d.db, d.dw};
    if (with_state) out.push_back(d.dstate_in);
    return out;
  };
  test::run_gradcheck(check, seed);
}

TEST(GatedDeltaRule2Reference, BackwardMatchesFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (double b_max : {1.0, 2.0}) {  // 2: the negative-eigenvalue variant b ∈ (0, 2)
    SCOPED_TRACE("b_max " + std::to_string(b_max));
    const Inputs in = gdn2_inputs(2, 5, 2, 3, 4, seed, b_max);
    check_reference_gradients(in, true, seed);
    check_reference_gradients(in, false, seed + 1);
  }
}

// The paper's own chunkwise algorithm — the App. A forward (γ-normalised keys, T = tril(Ē K̄ᵀ, −1), A = (I + T)⁻¹,
// Y = AĒ, U = AZ) and the App. B backward (the gate-aware WY VJP) — run in plain Python by
// tests/data/gdn2_paper_chunk_oracle.py on deterministic inputs rebuilt here: the reference and the chunked path
// (another algorithm: the backward is per token) agree with its outputs and every gradient to round-off.
TEST(GatedDeltaRule2Reference, MatchesThePapersChunkwiseFormulas) {
  namespace oracle = test::gdn2_oracle;
  const int64_t L = 10, K = 3, V = 2;
  auto build = [](int64_t rows, int64_t cols, auto f, bool unit = false) {
    std::vector<double> x;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> row;
      for (int64_t c = 0; c < cols; ++c) row.push_back(f(double(r), double(c)));
      double n = 0;
      for (double e : row) n += e * e;
      for (double e : row) x.push_back(unit ? e / std::sqrt(n) : e);
    }
    return x;
  };
  auto tensor = [](const std::vector<double>& x, const Shape& s) { return Tensor::from_vector(x, s, DType::F64); };
  const Shape kshape{1, L, 1, K}, vshape{1, L, 1, V}, sshape{1, 1, K, V};
  const Tensor q = tensor(build(
                              L, K, [](double t, double i) { return std::sin(1.3 * t + 0.7 * i + 0.1); }, true),
                          kshape);
  const Tensor k = tensor(build(
                              L, K, [](double t, double i) { return std::cos(0.9 * t - 0.4 * i + 0.3); }, true),
                          kshape);
  const Tensor v = tensor(build(L, V, [](double t, double j) { return std::sin(0.5 * t + 1.1 * j + 0.2); }), vshape);
  const Tensor g =
      tensor(build(L, K, [](double t, double i) { return -0.3 * (0.5 + 0.5 * std::sin(0.8 * t + 0.6 * i)); }), kshape);
  const Tensor b =
      tensor(build(L, K, [](double t, double i) { return 0.5 + 0.45 * std::cos(1.7 * t + 0.9 * i); }), kshape);
  const Tensor w =
      tensor(build(L, V, [](double t, double j) { return 0.5 + 0.45 * std::sin(1.1 * t - 0.5 * j); }), vshape);
  const Tensor s0 = tensor(build(K, V, [](double i, double j) { return std::cos(0.3 * i + 0.8 * j + 0.5); }), sshape);
  const Tensor dO = tensor(build(L, V, [](double t, double j) { return std::sin(0.4 * t + 0.9 * j - 0.2); }), vshape);
  const Tensor dST = tensor(build(K, V, [](double i, double j) { return std::sin(1.4 * i - 0.6 * j + 0.7); }), sshape);
  auto expected = [&](const auto& values, const Shape& s) {
    return tensor(std::vector<double>(std::begin(values), std::end(values)), s);
  };
  for (bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked" : "reference");
    Tensor st;
    const Tensor o = chunked ? ops::gated_delta_rule2(q, k, v, g, b, w, 1.0, s0, &st)
                             : ops::reference::gated_delta_rule2(q, k, v, g, b, w, 1.0, s0, &st);
    test::expect_close(o, expected(oracle::kO, vshape), 1e-13, 1e-13, "o");
    test::expect_close(st, expected(oracle::kST, sshape), 1e-13, 1e-13, "S_T");
    const ops::GatedDelta2Grads d =
        chunked ? ops::gated_delta_rule2_backward(dO, q, k, v, g, b, w, 1.0, s0, dST)
                : ops::reference::gated_delta_rule2_backward(dO, q, k, v, g, b, w, 1.0, s0, dST);
    test::expect_close(d.dq, expected(oracle::kDq, kshape), 1e-13, 1e-13, "dq");
    test::expect_close(d.dk, expected(oracle::kDk, kshape), 1e-13, 1e-13, "dk");
    test::expect_close(d.dv, expected(oracle::kDv, vshape), 1e-13, 1e-13, "dv");
    test::expect_close(d.dg, expected(oracle::kDg, kshape), 1e-13, 1e-13, "dg");
    test::expect_close(d.db, expected(oracle::kDb, kshape), 1e-13, 1e-13, "db");
    test::expect_close(d.dw, expected(oracle::kDw, vshape), 1e-13, 1e-13, "dw");
    test::expect_close(d.dstate_in, expected(oracle::kDS0, sshape), 1e-13, 1e-13, "dstate_in");
  }
}

// The paper's reduction (its §3, "Reductions"): b = β·1_K, w = β·1_V and a decay equal on every channel is Gated
// DeltaNet, checked against primer's own GDN reference (ops::reference::gated_delta_rule, written and verified on its
// own); the tied gradients obey ∂L/∂β = ⟨∂L/∂b, 1⟩ + ⟨∂L/∂w, 1⟩ and ∂L/∂g_scalar = ⟨∂L/∂g, 1⟩.
TEST(GatedDeltaRule2Reference, TiedGatesAndScalarDecayAreGatedDeltaNet) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T = 9, H = 2, K = 5, V = 3;
  const double scale = 0.6;
  const Inputs in = gdn2_inputs(B, T, H, K, V, seed);
  const Tensor beta = sigmoid_of_normal({B, T, H}, seed + 20, 1.0, false);
  const Tensor gs = sigmoid_of_normal({B, T, H}, seed + 21, 1.0, true);
  auto broadcast = [](const Tensor& x, int64_t n) {
    std::vector<double> src = x.to_vector<double>(), out;
    for (double e : src) out.insert(out.end(), size_t(n), e);
    Shape s = x.shape();
    s.push_back(n);
    return Tensor::from_vector(out, s, DType::F64);
  };
  auto channel_sum = [](const Tensor& x) {
    const std::vector<double> src = x.to_vector<double>();
    const int64_t n = x.size(-1);
    std::vector<double> out(src.size() / size_t(n), 0.0);
    for (size_t i = 0; i < src.size(); ++i) out[i / size_t(n)] += src[i];
    Shape s = x.shape();
    s.pop_back();
    return Tensor::from_vector(out, s, DType::F64);
  };
  Tensor st2, st1;
  const Tensor o2 = ops::reference::gated_delta_rule2(in.q, in.k, in.v, broadcast(gs, K), broadcast(beta, K),
                                                      broadcast(beta, V), scale, in.state, &st2);
  const Tensor o1 = ops::reference::gated_delta_rule(in.q, in.k, in.v, gs, beta, scale, in.state, &st1);
  test::expect_close(o2, o1, 1e-13, 1e-13, "o");
  test::expect_close(st2, st1, 1e-13, 1e-13, "S_T");

  const Tensor dout = test::randn({B, T, H, V}, seed + 22), dstate = test::randn({B, H, K, V}, seed + 23);
  const ops::GatedDelta2Grads d2 = ops::reference::gated_delta_rule2_backward(
      dout, in.q, in.k, in.v, broadcast(gs, K), broadcast(beta, K), broadcast(beta, V), scale, in.state, dstate);
  const ops::GatedDeltaGrads d1 =
      ops::reference::gated_delta_rule_backward(dout, in.q, in.k, in.v, gs, beta, scale, in.state, dstate);
  test::expect_close(d2.dq, d1.dq, 1e-12, 1e-12, "dq");
  test::expect_close(d2.dk, d1.dk, 1e-12, 1e-12, "dk");
  test::expect_close(d2.dv, d1.dv, 1e-12, 1e-12, "dv");
  test::expect_close(channel_sum(d2.dg), d1.dg, 1e-12, 1e-12, "dg summed over channels");
  const std::vector<double> db = channel_sum(d2.db).to_vector<double>(), dw = channel_sum(d2.dw).to_vector<double>();
  std::vector<double> dbeta(db.size());
  for (size_t i = 0; i < db.size(); ++i) dbeta[i] = db[i] + dw[i];
  test::expect_close(Tensor::from_vector(dbeta, {B, T, H}, DType::F64), d1.dbeta, 1e-12, 1e-12, "db + dw = dβ");
  test::expect_close(d2.dstate_in, d1.dstate_in, 1e-12, 1e-12, "dstate_in");
}

// One token from S_0 = 0 with α = 1 writes k (w⊙v)ᵀ; a second token on the same unit key with b = 1 erases exactly
// what the first wrote along k and writes its own value (Sᵀk = w⊙v), while with b = 0 it only adds. The transition
// I − k(b⊙k)ᵀ has eigenvalue 1 − Σ_i b_i k_i² along k (the paper's spectral remark): S_0 = k uᵀ maps to
// (1 − Σ b k²) k uᵀ with no write.
TEST(GatedDeltaRule2Reference, ErasesAlongTheGatedKeyAndWritesTheGatedValue) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t K = 4, V = 3;
  const Inputs in = gdn2_inputs(1, 1, 1, K, V, seed);
  const Tensor zero_g = Tensor::zeros({1, 1, 1, K}, DType::F64);
  const std::vector<double> k = in.k.to_vector<double>(), v = in.v.to_vector<double>(), w = in.w.to_vector<double>(),
                            b = in.b.to_vector<double>();
  // S_0 = k uᵀ, zero write: S_1 = (1 − Σ b k²) k uᵀ.
  const Tensor u = test::randn({V}, seed + 30);
  std::vector<double> s0(size_t(K * V));
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) s0[size_t(i * V + j)] = k[size_t(i)] * u.to_vector<double>()[size_t(j)];
  Tensor st;
  ops::reference::gated_delta_rule2(in.q, in.k, in.v, zero_g, in.b, Tensor::zeros({1, 1, 1, V}, DType::F64), 1.0,
                                    Tensor::from_vector(s0, {1, 1, K, V}, DType::F64), &st);
  double lambda = 1;
  for (int64_t i = 0; i < K; ++i) lambda -= b[size_t(i)] * k[size_t(i)] * k[size_t(i)];
  const std::vector<double> s1 = st.to_vector<double>();
  for (size_t e = 0; e < s1.size(); ++e) EXPECT_NEAR(s1[e], lambda * s0[e], 1e-14);
  // b = 1 on a unit key: the read-back along k is exactly the gated value, whatever S_0 held.
  Tensor st1;
  ops::reference::gated_delta_rule2(in.q, in.k, in.v, zero_g, Tensor::full({1, 1, 1, K}, 1.0, DType::F64), in.w, 1.0,
                                    in.state, &st1);
  const std::vector<double> S = st1.to_vector<double>();
  for (int64_t j = 0; j < V; ++j) {
    double read = 0;
    for (int64_t i = 0; i < K; ++i) read += S[size_t(i * V + j)] * k[size_t(i)];
    EXPECT_NEAR(read, w[size_t(j)] * v[size_t(j)], 1e-13);
  }
}

struct ChunkCase {
  int64_t T, K;
  bool with_state;
  double b_max, decay;
};
std::string case_name(const ::testing::TestParamInfo<ChunkCase>& i) {
  return "T" + std::to_string(i.param.T) + "_K" + std::to_string(i.param.K) +
         (i.param.with_state ? "_state" : "_nostate") + (i.param.b_max > 1 ? "_negeig" : "") +
         (i.param.decay > 1 ? "_strongdecay" : "");
}

class GatedDeltaRule2Chunked : public ::testing::TestWithParam<ChunkCase> {};

// Forward (o and S_T) and every gradient of the chunked path in `dtype` against the f64 reference on the same inputs,
// with a random final-state gradient. One (batch, head) at K = V = 64 and 128 keeps the reference fast; the small
// head dim runs two of each.
void compare_chunked(const ChunkCase& c, DType dtype, double rel_out, double rel_grad, uint64_t seed) {
  const int64_t B = c.K < 64 ? 2 : 1, H = c.K < 64 ? 2 : 1, K = c.K, V = c.K < 64 ? 12 : c.K;
  const double scale = 1.0 / std::sqrt(double(K));
  const Inputs in = gdn2_inputs(B, c.T, H, K, V, seed, c.b_max, c.decay);
  const Tensor state = c.with_state ? in.state : Tensor();
  const Tensor dout = test::randn({B, c.T, H, V}, seed + 11), dstate = test::randn({B, H, K, V}, seed + 12);
  auto as = [&](const Tensor& t) { return t.defined() ? t.to(dtype) : Tensor(); };

  Tensor ref_state, state_out;
  const Tensor ref = ops::reference::gated_delta_rule2(in.q, in.k, in.v, in.g, in.b, in.w, scale, state, &ref_state);
  const Tensor o =
      ops::gated_delta_rule2(as(in.q), as(in.k), as(in.v), as(in.g), as(in.b), as(in.w), scale, as(state), &state_out);
  EXPECT_EQ(o.dtype(), dtype);
  EXPECT_EQ(state_out.dtype(), dtype);
  test::expect_close(o, ref, rel_out, 1.0, "o");
  test::expect_close(state_out, ref_state, rel_out, 1.0, "state_out");

  const ops::GatedDelta2Grads r =
      ops::reference::gated_delta_rule2_backward(dout, in.q, in.k, in.v, in.g, in.b, in.w, scale, state, dstate);
  const ops::GatedDelta2Grads d = ops::gated_delta_rule2_backward(as(dout), as(in.q), as(in.k), as(in.v), as(in.g),
                                                                  as(in.b), as(in.w), scale, as(state), as(dstate));
  test::expect_close(d.dq, r.dq, rel_grad, 1.0, "dq");
  test::expect_close(d.dk, r.dk, rel_grad, 1.0, "dk");
  test::expect_close(d.dv, r.dv, rel_grad, 1.0, "dv");
  test::expect_close(d.dg, r.dg, rel_grad, 1.0, "dg");
  test::expect_close(d.db, r.db, rel_grad, 1.0, "db");
  test::expect_close(d.dw, r.dw, rel_grad, 1.0, "dw");
  ASSERT_EQ(d.dstate_in.defined(), c.with_state);
  if (c.with_state) test::expect_close(d.dstate_in, r.dstate_in, rel_grad, 1.0, "dstate_in");
}

TEST_P(GatedDeltaRule2Chunked, F64MatchesTheReference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // The same maths reassociated (the UT solve, chunk products, decay ratios): f64 rounding only.
  compare_chunked(GetParam(), DType::F64, 1e-12, 1e-12, seed);
}

TEST_P(GatedDeltaRule2Chunked, F32MatchesTheReference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // GDN's f32 bounds (tests/cpu/test_gated_delta_rule.cpp): f32 rounds at 2^-24 ≈ 6e-8; dot products of ≤ 128 terms,
  // the triangular solve and T/64 chained chunk updates grow that to ~1e-6 for o and S_T; the backward's reverse
  // recurrence accumulates over every token into dS and sums signed terms into dg, db.
  compare_chunked(GetParam(), DType::F32, 1e-5, 3e-5, seed);
}

INSTANTIATE_TEST_SUITE_P(Lengths, GatedDeltaRule2Chunked,
                         ::testing::Values(ChunkCase{1, 16, true, 1.0, 1.0}, ChunkCase{7, 16, false, 1.0, 1.0},
                                           ChunkCase{64, 16, true, 1.0, 1.0}, ChunkCase{100, 16, false, 2.0, 1.0},
                                           ChunkCase{130, 16, true, 1.0, 8.0}, ChunkCase{200, 16, true, 2.0, 1.0},
                                           ChunkCase{67, 64, true, 1.0, 1.0}, ChunkCase{130, 128, true, 1.0, 1.0}),
                         case_name);

// Running [x1; x2] at once equals x1 then x2 from x1's final state, in value and in every gradient: through the
// autograd node, the second call's state gradient flows back into the first call's state_out.
TEST(GatedDeltaRule2, ChainingCarriesTheStateAndItsGradient) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T1 = 70, T2 = 45, H = 2, K = 8, V = 6;
  const double scale = 0.35;
  const Inputs in = gdn2_inputs(B, T1 + T2, H, K, V, seed);
  const Tensor R = test::randn({B, T1 + T2, H, V}, seed + 1), Rs = test::randn({B, H, K, V}, seed + 2);
  const std::vector<Tensor> whole{in.q, in.k, in.v, in.g, in.b, in.w};

  Tensor full_state;
  const Tensor full = ops::gated_delta_rule2(in.q, in.k, in.v, in.g, in.b, in.w, scale, in.state, &full_state);
  const ops::GatedDelta2Grads fg =
      ops::gated_delta_rule2_backward(R, in.q, in.k, in.v, in.g, in.b, in.w, scale, in.state, Rs);

  std::vector<ag::Var> x1, x2;
  for (const Tensor& t : whole) {
    x1.push_back(ag::leaf(t.slice(1, 0, T1).contiguous()));
    x2.push_back(ag::leaf(t.slice(1, T1, T1 + T2).contiguous()));
  }
  const ag::Var s0 = ag::leaf(in.state);
  ag::Var s1, s2;
  const ag::Var o1 = ag::gated_delta_rule2(x1[0], x1[1], x1[2], x1[3], x1[4], x1[5], scale, s0, &s1);
  const ag::Var o2 = ag::gated_delta_rule2(x2[0], x2[1], x2[2], x2[3], x2[4], x2[5], scale, s1, &s2);
  test::expect_close(o1->value, full.slice(1, 0, T1), 1e-13, 1e-12, "o, first part");
  test::expect_close(o2->value, full.slice(1, T1, T1 + T2), 1e-13, 1e-12, "o, second part");
  test::expect_close(s2->value, full_state, 1e-13, 1e-12, "final state");

  o1->grad = R.slice(1, 0, T1).contiguous();
  o2->grad = R.slice(1, T1, T1 + T2).contiguous();
  s2->grad = Rs;
  ag::current_tape().backward();
  const Tensor fgrads[] = {fg.dq, fg.dk, fg.dv, fg.dg, fg.db, fg.dw};
  const char* names[] = {"dq", "dk", "dv", "dg", "db", "dw"};
  for (size_t i = 0; i < 6; ++i) {
    test::expect_close(x1[i]->grad, fgrads[i].slice(1, 0, T1), 1e-12, 1e-11, std::string(names[i]) + ", first part");
    test::expect_close(x2[i]->grad, fgrads[i].slice(1, T1, T1 + T2), 1e-12, 1e-11,
                       std::string(names[i]) + ", second part");
  }
  test::expect_close(s0->grad, fg.dstate_in, 1e-12, 1e-11, "dstate_in");
}

TEST(GatedDeltaRule2, RejectsBadArguments) {
  const Inputs in = gdn2_inputs(1, 3, 2, 4, 4, 1);
  test::expect_error(
      [&] {
        ops::gated_delta_rule2(in.q, in.k, in.v, in.g.reshape({1, 3, 8}), in.b, in.w, 1.0, Tensor(), nullptr);
      },
      {"gated_delta_rule2", "'g'"});
  test::expect_error(
      [&] { ops::gated_delta_rule2(in.q, in.k, in.v, in.g, in.b, in.w.to(DType::F32), 1.0, Tensor(), nullptr); },
      {"gated_delta_rule2", "'w'"});
  test::expect_error(
      [&] {
        ops::gated_delta_rule2(in.q, in.k, in.v, in.g, in.b, in.w, 1.0, in.state.reshape({2, 4, 4}), nullptr);
      },
      {"gated_delta_rule2", "'state_in'"});
  test::expect_error(
      [&] {
        ops::reference::gated_delta_rule2(in.q.to(DType::F32), in.k.to(DType::F32), in.v.to(DType::F32),
                                          in.g.to(DType::F32), in.b.to(DType::F32), in.w.to(DType::F32), 1.0, Tensor(),
                                          nullptr);
      },
      {"reference", "f64"});
}

}  // namespace
}  // namespace primer
