// Scalar-gated linear attention on the CPU: the f64 reference's hand-written backward against finite differences
// (every input, with a gradient flowing into the final state), the chunked algorithm against the reference (f64:
// the same maths, so to rounding; f32 with a dtype-justified tolerance) for T around and across the chunk size, with
// and without an initial state, chaining (one call over [x1; x2] equals two calls carrying the state), the autograd
// node, and the argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/autograd/gla.h"
#include "core/ops/gla.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

struct Inputs {
  Tensor q, k, v, g, state_in, dout, dstate_out;
};

// g ~ U(−1, 0.1): mostly decaying, some growth (any finite log decay is valid), strong enough that e^{G} spans
// many orders of magnitude over a chunk. Every tensor is fresh random data.
Inputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, bool with_state, uint64_t seed,
                   DType dtype = DType::F64) {
  Inputs in;
  in.q = test::randn({B, T, H, K}, seed + 1, dtype, Device::cpu(), 0.5);
  in.k = test::randn({B, T, H, K}, seed + 2, dtype, Device::cpu(), 0.5);
  in.v = test::randn({B, T, H, V}, seed + 3, dtype);
  in.g = test::rand_uniform({B, T, H}, seed + 4, -1.0, 0.1, dtype);
  if (with_state) in.state_in = test::randn({B, H, K, V}, seed + 5, dtype);
  in.dout = test::randn({B, T, H, V}, seed + 6, dtype);
  in.dstate_out = test::randn({B, H, K, V}, seed + 7, dtype);
  return in;
}

Inputs to_f64(const Inputs& in) {
  auto up = [](const Tensor& t) { return t.defined() ? t.to(DType::F64) : Tensor(); };
  return {up(in.q), up(in.k), up(in.v), up(in.g), up(in.state_in), up(in.dout), up(in.dstate_out)};
}

TEST(Gla, ReferenceBackwardMatchesFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (bool with_state : {true, false}) {
    SCOPED_TRACE(with_state ? "with state_in" : "zero initial state");
    const Inputs in = make_inputs(2, 6, 2, 3, 4, with_state, seed);
    const double scale = 0.7;
    test::GradCheck check;
    check.inputs = {in.q, in.k, in.v, in.g};
    check.names = {"q", "k", "v", "g"};
    if (with_state) {
      check.inputs.push_back(in.state_in);
      check.names.push_back("state_in");
    }
    auto state_of = [](const std::vector<Tensor>& x) { return x.size() > 4 ? x[4] : Tensor(); };
    check.forward = [&](const std::vector<Tensor>& x) {
      Tensor st;
      Tensor o = ops::reference::gla(x[0], x[1], x[2], x[3], scale, state_of(x), &st);
      return std::vector<Tensor>{o, st};  // the checked scalar weighs S_T too: dstate_out flows in
    };
    check.backward = [&](const std::vector<Tensor>& x, const std::vector<Tensor>& gout) {
      const ops::GlaGrads d =
          ops::reference::gla_backward(gout[0], x[0], x[1], x[2], x[3], scale, state_of(x), gout[1]);
      std::vector<Tensor> r{d.dq, d.dk, d.dv, d.dg};
      if (x.size() > 4) r.push_back(d.dstate_in);
      return r;
    };
    test::run_gradcheck(check, seed);
  }
}

// dg compared in relative L2, except where it vanishes analytically (a single token from a zero state: dg_0 =
// a_0 <dS, S_0> = 0); there the chunked sum q·dq − k·dk + ∂/∂G_L cancels to rounding, so its error is bounded
// relative to the size of those terms: the mean over rows of Σ_i |k_ri dk_ri|.
void expect_dg_close(const Tensor& dg, const Tensor& ref, const Tensor& ref_dk, const Tensor& k, double tol) {
  double ref_norm = 0;
  for (double x : ref.to_vector<double>()) ref_norm += x * x;
  if (ref_norm > 0) return test::expect_close(dg, ref, tol, 1e30, "dg");
  const auto dk = ref_dk.to_vector<double>(), kv = k.to_vector<double>();
  double terms = 0;
  for (size_t i = 0; i < dk.size(); ++i) terms += std::abs(dk[i] * kv[i]);
  terms /= double(ref.numel());
  test::expect_close(dg, ref, std::numeric_limits<double>::infinity(), tol * terms, "dg (zero)");
}

// Runs forward and backward of the op (chunked) and the reference on the same values and compares.
void expect_chunked_matches_reference(const Inputs& in, double scale, double tol_out, double tol_grad, double tol_dg) {
  const Inputs r = to_f64(in);
  Tensor st, rst;
  const Tensor o = ops::gla(in.q, in.k, in.v, in.g, scale, in.state_in, &st);
  const Tensor ro = ops::reference::gla(r.q, r.k, r.v, r.g, scale, r.state_in, &rst);
  test::expect_close(o, ro, tol_out, 1e30, "o");
  test::expect_close(st, rst, tol_out, 1e30, "state_out");
  const ops::GlaGrads d = ops::gla_backward(in.dout, in.q, in.k, in.v, in.g, scale, in.state_in, in.dstate_out);
  const ops::GlaGrads rd = ops::reference::gla_backward(r.dout, r.q, r.k, r.v, r.g, scale, r.state_in, r.dstate_out);
  test::expect_close(d.dq, rd.dq, tol_grad, 1e30, "dq");
  test::expect_close(d.dk, rd.dk, tol_grad, 1e30, "dk");
  test::expect_close(d.dv, rd.dv, tol_grad, 1e30, "dv");
  expect_dg_close(d.dg, rd.dg, rd.dk, r.k, tol_dg);
  ASSERT_EQ(d.dstate_in.defined(), in.state_in.defined());
  if (in.state_in.defined()) test::expect_close(d.dstate_in, rd.dstate_in, tol_grad, 1e30, "dstate_in");
}

TEST(Gla, ChunkedF64MatchesTheReference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t T : {1, 5, 64, 100, 200})
    for (bool with_state : {true, false}) {
      SCOPED_TRACE("T " + std::to_string(T) + (with_state ? " with state_in" : ""));
      // Same maths in another order: only f64 rounding (~1e-16 per operation over sums of ≤ 200 terms) differs.
      expect_chunked_matches_reference(make_inputs(2, T, 3, 8, 12, with_state, seed + uint64_t(T)), 0.35, 1e-12, 1e-12,
                                       1e-12);
    }
}

TEST(Gla, ChunkedF32MatchesTheReference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t T : {1, 64, 200})
    for (bool with_state : {true, false}) {
      SCOPED_TRACE("T " + std::to_string(T) + (with_state ? " with state_in" : ""));
      // The reference sees the same f32 values upcast; the f32 path rounds every product and sum to 2^-24 (6e-8)
      // relative, over chains of ≤ 64 intra-chunk terms, K = 16 / V = 32 wide dot products and ≤ 4 state hand-offs:
      // a few hundred roundings, which average to ~1e-6 relative L2 (measured: ≤ 8e-7 for o, the state and dq, dk,
      // dv; ≤ 1.3e-6 for dg, a difference q·dq − k·dk summed over a chunk). 1e-5 leaves an order of magnitude.
      expect_chunked_matches_reference(make_inputs(2, T, 2, 16, 32, with_state, seed + uint64_t(T), DType::F32), 0.25,
                                       1e-5, 1e-5, 1e-5);
    }
}

TEST(Gla, TwoCallsCarryingTheStateEqualOneCall) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Inputs in = make_inputs(2, 130, 2, 8, 6, true, seed);
  const int64_t T1 = 70;  // splits a chunk
  auto part = [&](const Tensor& t, int64_t a, int64_t b) { return t.slice(1, a, b); };
  Tensor st_full, st1, st2;
  const Tensor o_full = ops::gla(in.q, in.k, in.v, in.g, 0.5, in.state_in, &st_full);
  const Tensor o1 =
      ops::gla(part(in.q, 0, T1), part(in.k, 0, T1), part(in.v, 0, T1), part(in.g, 0, T1), 0.5, in.state_in, &st1);
  const Tensor o2 =
      ops::gla(part(in.q, T1, 130), part(in.k, T1, 130), part(in.v, T1, 130), part(in.g, T1, 130), 0.5, st1, &st2);
  test::expect_close(o1, part(o_full, 0, T1), 1e-13, 1e30, "o of the first call");
  test::expect_close(o2, part(o_full, T1, 130), 1e-13, 1e30, "o of the second call");
  test::expect_close(st2, st_full, 1e-13, 1e30, "final state");
}

// The autograd node against finite differences through the chunked op, with the final state used downstream.
TEST(Gla, AutogradNodeMatchesFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Inputs in = make_inputs(1, 70, 2, 3, 2, true, seed);
  test::GradCheck check;
  check.inputs = {in.q, in.k, in.v, in.g, in.state_in};
  check.names = {"q", "k", "v", "g", "state_in"};
  auto run = [](const std::vector<ag::Var>& x, ag::Var* st) { return ag::gla(x[0], x[1], x[2], x[3], 0.8, x[4], st); };
  check.forward = [&](const std::vector<Tensor>& x) {
    ag::NoGrad no_grad;
    std::vector<ag::Var> v;
    for (const Tensor& t : x) v.push_back(ag::constant(t));
    ag::Var st;
    ag::Var o = run(v, &st);
    return std::vector<Tensor>{o->value, st->value};
  };
  check.backward = [&](const std::vector<Tensor>& x, const std::vector<Tensor>& gout) {
    std::vector<ag::Var> v;
    for (const Tensor& t : x) v.push_back(ag::leaf(t));
    ag::Var st;
    ag::Var o = run(v, &st);
    o->grad = gout[0];
    st->grad = gout[1];
    ag::current_tape().backward();
    std::vector<Tensor> r;
    for (const ag::Var& a : v) r.push_back(a->grad);
    for (size_t i = 0; i < r.size(); ++i) EXPECT_TRUE(r[i].defined()) << "no gradient for " << check.names[i];
    return r;
  };
  test::run_gradcheck(check, seed);
}

TEST(Gla, ErrorsNameTheArgument) {
  const Inputs in = make_inputs(1, 4, 2, 3, 5, true, test::fresh_seed());
  test::expect_error([&] { ops::gla(in.q, in.k, in.q, in.g.slice(1, 0, 3), 1.0, Tensor(), nullptr); },
                     {"gla", "'g'", "expected shape [1, 4, 2]"});
  test::expect_error([&] { ops::gla(in.q, in.k.to(DType::F32), in.v, in.g, 1.0, Tensor(), nullptr); },
                     {"gla", "'k'", "f64"});
  test::expect_error([&] { ops::gla(in.q, in.k, in.v, in.g, 1.0, in.state_in.slice(3, 0, 4), nullptr); },
                     {"gla", "'state_in'", "[1, 2, 3, 5]"});
  test::expect_error([&] { ops::reference::gla(in.q.to(DType::F32), in.k, in.v, in.g, 1.0, Tensor(), nullptr); },
                     {"reference::gla", "'q'", "f64"});
  test::expect_error(
      [&] { ops::gla_backward(in.dout.slice(1, 0, 2), in.q, in.k, in.v, in.g, 1.0, Tensor(), Tensor()); },
      {"gla_backward", "'dout'"});
  // Another output dtype only from f32 inputs to bf16 on CUDA (GKA's precise readout); on the CPU o is v's dtype.
  test::expect_error([&] { ops::gla(in.q, in.k, in.v, in.g, 1.0, Tensor(), nullptr, DType::F32); },
                     {"gla", "the output dtype is f32", "expected v's dtype"});
  test::expect_error(
      [&] { ops::gla_backward(in.dout.to(DType::F32), in.q, in.k, in.v, in.g, 1.0, Tensor(), Tensor()); },
      {"gla_backward", "dout's dtype is f32", "expected v's dtype"});
}

}  // namespace
}  // namespace primer
