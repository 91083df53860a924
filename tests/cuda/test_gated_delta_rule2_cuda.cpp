// Gated DeltaNet-2's CUDA core against the f64 token-by-token reference on the same rounded inputs: o, the final
// state and every gradient (q, k, v, g, b, w, the initial state, with output and final-state gradients flowing in),
// for T ∈ {1, 7, 67, 100, 200} (the backward's checkpoints every 32 tokens and pieces of 8: T = 1, inside one piece,
// across pieces and blocks, a block cut short), key dims 64 and 128 and the padded ones 16 and 48 (rows of a lane
// past K), value dims that fill the CTAs' 16 columns and ones that leave them partly empty (12, 20), f32 and bf16
// q, k, v, the negative-eigenvalue erase gate b ∈ (0, 2) and strong decay.
//
// Tolerances (relative L2 against the reference):
//  - f32: the kernels run the recurrence in f32 (the chunked CPU path's f32 bounds hold for the same rounding of
//    K-term sums and T chained updates: 1e-5 on o and S_T, 3e-5 on gradients; tests/cpu/test_gated_delta_rule2.cpp).
//  - bf16 q, k, v through the recurrent kernels: o, dq, dk and dv are stored in bf16, a 2^-9 ≈ 2e-3 rounding of each
//    element, so 4e-3 (the parity bound of every bf16 output); the state, dg, db, dw and the initial-state gradient
//    stay f32 from the same rounded inputs, at the f32 bounds.
//  - the chunked kernels (bf16, K = V ∈ {64, 128}) run Gated DeltaNet's pipeline of bf16 tensor-core products with
//    per-channel decays folded into the operands, so they take that pipeline's bounds
//    (tests/cuda/test_gated_delta_rule_cuda.cpp): each product rounds its operands to bf16 (2^-9 relative) and the
//    forward chains about four of them (A, then Y and Ū, then R = Ū − Y S, then o or the state): 5e-3 on o and
//    S_T; the backward chains two more through the inverse (dT = −tril(dE Yᵀ + dZ Ūᵀ)), 8e-3 on the gradients that
//    are one such chain per element (dq, dk, dv, dw, the initial state's). The gate gradients are sums of terms of
//    both signs, whose cancellation leaves a larger relative error: dg per channel (q·dq − k·dk + (b⊙k)·d(b⊙k) + …)
//    and db = k ⊙ (S̄ dρ), a sum over the V value columns for each key channel, as GDN's dβ is over both axes: 2e-2,
//    GDN's gate bound. (Measured on an H200: db 1.2e-2 with strong decay at K = 128, where S̄ = Diag(α) S is damped
//    most; every other gradient 1.5–3.2e-3.)
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/ops/gated_delta_rule2.h"
#include "tests/cuda/parity_util.h"
#include "tests/support/gdn2_inputs.h"

namespace primer {
namespace {

constexpr double kF32Out = 1e-5, kF32Grad = 3e-5, kBf16 = 4e-3;
constexpr double kChunkOut = 5e-3, kChunkGrad = 8e-3, kChunkGate = 2e-2;

using ops::GatedDelta2Kernels;

struct Case {
  int64_t T, K, V;
  DType dtype;
  bool with_state = true;
  double b_max = 1, decay = 1;
  GatedDelta2Kernels kernels = GatedDelta2Kernels::automatic;
};

// Whether the chunked kernels apply to a case's shape and dtype, and whether the case runs them.
bool chunk_shape(const Case& c) { return c.dtype == DType::BF16 && c.K == c.V && (c.K == 64 || c.K == 128); }
bool runs_chunked(const Case& c) {
  return chunk_shape(c) && (c.kernels == GatedDelta2Kernels::chunked ||
                            (c.kernels == GatedDelta2Kernels::automatic && c.T > ops::kGatedDelta2RecurrentTokens));
}

// The bounds of each output for a case's kernels and dtype.
struct Bounds {
  double o, state, token_grad, f32_grad, gate_grad;  // gate_grad: dg and db
};
Bounds bounds_of(const Case& c) {
  if (runs_chunked(c)) return {kChunkOut, kChunkOut, kChunkGrad, kChunkGrad, kChunkGate};
  if (c.dtype == DType::BF16) return {kBf16, kF32Out, kBf16, kF32Grad, kF32Grad};
  return {kF32Out, kF32Out, kF32Grad, kF32Grad, kF32Grad};
}

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  const Case& c = i.param;
  return "T" + std::to_string(c.T) + "_K" + std::to_string(c.K) + "_V" + std::to_string(c.V) +
         (c.with_state ? "" : "_nostate") + (c.b_max > 1 ? "_negeig" : "") + (c.decay > 1 ? "_strongdecay" : "") +
         (c.dtype == DType::BF16 ? "_bf16" : "_f32") + (c.kernels == GatedDelta2Kernels::recurrent ? "_recurrent" : "");
}

class GatedDeltaRule2Cuda : public ::testing::TestWithParam<Case> {};

TEST_P(GatedDeltaRule2Cuda, MatchesTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Case& c = GetParam();
  // At least 32 (row, token, head) triples: at T = 1 a few per-head scalars (dP_00 = scale·⟨dO, R⟩, a dot product
  // that may cancel) multiply whole gradient rows, so over B·H = 4 of them one cancelling dot product can decide the
  // relative error (dk 6.8e-3 of 8e-3 once on an H200); with 32 the error is an average again, as in
  // test_gated_delta_rule_cuda.cpp.
  const int64_t H = 2, B = std::max<int64_t>(2, (32 + c.T * H - 1) / (c.T * H));
  const double scale = 1.0 / std::sqrt(double(c.K));
  const test::Gdn2Inputs in = test::gdn2_inputs(B, c.T, H, c.K, c.V, seed, c.b_max, c.decay);
  auto gpu = [](const Tensor& t, DType dt) { return t.to(dt).to(Device::cuda()); };
  const Tensor q = gpu(in.q, c.dtype), k = gpu(in.k, c.dtype), v = gpu(in.v, c.dtype), g = gpu(in.g, DType::F32),
               b = gpu(in.b, DType::F32), w = gpu(in.w, DType::F32),
               s0 = c.with_state ? gpu(in.state, DType::F32) : Tensor();
  const Tensor dout = gpu(test::randn(in.v.shape(), seed + 11), c.dtype),
               dstate = gpu(test::randn(in.state.shape(), seed + 12), DType::F32);
  // The reference sees exactly the values the GPU got.
  auto f64 = [](const Tensor& t) { return t.defined() ? test::cpu_f64(t) : Tensor(); };
  const Bounds tol = bounds_of(c);
  // The op's own notion of where the chunked kernels apply must be this test's (the bounds depend on it).
  EXPECT_EQ(ops::gated_delta_rule2_token_dtype(Device::cuda(), c.dtype, c.K, c.V, DType::F32) == DType::BF16,
            chunk_shape(c));

  test::poison_pool();
  Tensor state_out, ref_state;
  const Tensor o = ops::gated_delta_rule2(q, k, v, g, b, w, scale, s0, &state_out, nullptr, c.kernels);
  const Tensor ro =
      ops::reference::gated_delta_rule2(f64(q), f64(k), f64(v), f64(g), f64(b), f64(w), scale, f64(s0), &ref_state);
  EXPECT_EQ(o.dtype(), c.dtype);
  EXPECT_EQ(state_out.dtype(), DType::F32);
  test::expect_rel(o, ro, tol.o, "o");
  test::expect_rel(state_out, ref_state, tol.state, "state_out");
  test::expect_rel(ops::gated_delta_rule2(q, k, v, g, b, w, scale, s0, nullptr, nullptr, c.kernels), ro, tol.o,
                   "o (no state out)");

  test::poison_pool();
  const ops::GatedDelta2Grads d =
      ops::gated_delta_rule2_backward(dout, q, k, v, g, b, w, scale, s0, dstate, Tensor(), c.kernels);
  const ops::GatedDelta2Grads r = ops::reference::gated_delta_rule2_backward(
      f64(dout), f64(q), f64(k), f64(v), f64(g), f64(b), f64(w), scale, f64(s0), f64(dstate));
  EXPECT_EQ(d.dq.dtype(), c.dtype);
  EXPECT_EQ(d.dv.dtype(), c.dtype);
  EXPECT_EQ(d.dg.dtype(), DType::F32);
  test::expect_rel(d.dq, r.dq, tol.token_grad, "dq");
  test::expect_rel(d.dk, r.dk, tol.token_grad, "dk");
  test::expect_rel(d.dv, r.dv, tol.token_grad, "dv");
  test::expect_rel(d.dg, r.dg, tol.gate_grad, "dg");
  test::expect_rel(d.db, r.db, tol.gate_grad, "db");
  test::expect_rel(d.dw, r.dw, tol.f32_grad, "dw");
  ASSERT_EQ(d.dstate_in.defined(), c.with_state);
  if (c.with_state) test::expect_rel(d.dstate_in, r.dstate_in, tol.f32_grad, "dstate_in");

  // Only the output gradient: the kernels' null final-state gradient.
  const ops::GatedDelta2Grads d1 =
      ops::gated_delta_rule2_backward(dout, q, k, v, g, b, w, scale, s0, Tensor(), Tensor(), c.kernels);
  const ops::GatedDelta2Grads r1 = ops::reference::gated_delta_rule2_backward(f64(dout), f64(q), f64(k), f64(v), f64(g),
                                                                              f64(b), f64(w), scale, f64(s0), Tensor());
  test::expect_rel(d1.dk, r1.dk, tol.token_grad, "dk (dout only)");
  test::expect_rel(d1.dg, r1.dg, tol.gate_grad, "dg (dout only)");
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatedDeltaRule2Cuda,
                         ::testing::Values(Case{1, 64, 64, DType::F32}, Case{7, 128, 128, DType::F32},
                                           Case{67, 64, 64, DType::F32, false}, Case{100, 128, 128, DType::F32},
                                           Case{200, 64, 64, DType::F32}, Case{67, 48, 12, DType::F32},
                                           Case{33, 16, 20, DType::F32, false},
                                           Case{100, 64, 64, DType::F32, true, 2.0},
                                           Case{100, 64, 64, DType::F32, true, 1.0, 8.0},
                                           Case{1, 128, 128, DType::BF16, true, 1, 1, GatedDelta2Kernels::recurrent},
                                           Case{67, 64, 64, DType::BF16, true, 1, 1, GatedDelta2Kernels::recurrent},
                                           Case{200, 128, 128, DType::BF16, true, 1, 1, GatedDelta2Kernels::recurrent},
                                           Case{100, 48, 20, DType::BF16, false}),
                         case_name);

// The chunked kernels (forced: `automatic` runs calls of a few tokens recurrently): T = 1, inside one chunk, exactly
// one, a chunk and a bit, several chunks cut short; both head dims; without initial state; the [0, 2) erase gate;
// strong decay (products of e^g far below f32's range inside a chunk, where a factor e^{−G} formed anywhere would
// overflow).
std::vector<Case> chunked_cases() {
  std::vector<Case> cases = {Case{1, 64, 64, DType::BF16},
                             Case{7, 128, 128, DType::BF16},
                             Case{64, 64, 64, DType::BF16},
                             Case{67, 128, 128, DType::BF16, false},
                             Case{130, 64, 64, DType::BF16},
                             Case{200, 128, 128, DType::BF16},
                             Case{100, 64, 64, DType::BF16, true, 2.0},
                             Case{100, 128, 128, DType::BF16, true, 1.0, 8.0},
                             Case{200, 64, 64, DType::BF16, false, 2.0, 8.0}};
  for (Case& c : cases) c.kernels = GatedDelta2Kernels::chunked;
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Chunked, GatedDeltaRule2Cuda, ::testing::ValuesIn(chunked_cases()), case_name);

// Fresh inputs on the GPU as the layer hands them over where the chunked kernels apply (bf16 q, k, v and dout; f32
// gates, initial state and final-state gradient), K = V = D.
struct GpuInputs {
  Tensor q, k, v, g, b, w, s0, dout, ds;
  GpuInputs(int64_t B, int64_t T, int64_t H, int64_t D, uint64_t seed) {
    const test::Gdn2Inputs in = test::gdn2_inputs(B, T, H, D, D, seed);
    auto gpu = [](const Tensor& t, DType dt) { return t.to(dt).to(Device::cuda()); };
    q = gpu(in.q, DType::BF16), k = gpu(in.k, DType::BF16), v = gpu(in.v, DType::BF16);
    g = gpu(in.g, DType::F32), b = gpu(in.b, DType::F32), w = gpu(in.w, DType::F32), s0 = gpu(in.state, DType::F32);
    dout = gpu(test::randn(in.v.shape(), seed + 11), DType::BF16);
    ds = gpu(test::randn(in.state.shape(), seed + 12), DType::F32);
  }
};

// Every element of `actual` equals `expected`'s or is the bf16 value next to it: what two runs give for a gradient
// summed by f32 atomics in any order (~1e-7 apart) and then rounded to bf16, where a sum near a rounding boundary may
// round either way.
void expect_within_one_bf16_ulp(const Tensor& actual, const Tensor& expected, const std::string& what) {
  const std::vector<double> a = test::cpu_f64(actual).to_vector<double>(),
                            e = test::cpu_f64(expected).to_vector<double>();
  ASSERT_EQ(a.size(), e.size()) << what;
  size_t worst = 0;
  double worst_ulps = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double ulps = std::abs(a[i] - e[i]) / std::ldexp(std::max(std::abs(a[i]), std::abs(e[i])), -7);
    if (a[i] != e[i] && !(ulps <= worst_ulps)) worst = i, worst_ulps = ulps;
  }
  EXPECT_LE(worst_ulps, 1.0) << what << ": element " << worst << " is " << a[worst] << " against " << e[worst];
}

// `automatic` runs decode steps (T ≤ 8) on the recurrent kernels and longer calls on the chunked ones: each gives
// what the forced choice gives (the same kernels on the same values, while the two kinds of kernels differ by ~1e-3),
// forward and backward, to 1e-6 — except where the recurrent backward sums dq and dk by f32 atomics, whose order
// varies, before rounding them to bf16: those within one bf16 ulp per element. Forcing the chunked kernels where they
// do not apply (f32 q, k, v) is an error that says why.
TEST(GatedDeltaRule2Cuda, AutomaticRunsADecodeStepRecurrently) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const int64_t T : {1, 8, 9, 70}) {
    const int64_t D = 64;
    const double scale = 1.0 / std::sqrt(double(D));
    const GpuInputs in(2, T, 2, D, seed);
    const Tensor &q = in.q, &k = in.k, &v = in.v, &g = in.g, &b = in.b, &w = in.w, &s0 = in.s0, &dout = in.dout;
    const bool recurrent = T <= ops::kGatedDelta2RecurrentTokens;
    const GatedDelta2Kernels expected = recurrent ? GatedDelta2Kernels::recurrent : GatedDelta2Kernels::chunked;
    const std::string what = " (T = " + std::to_string(T) + (recurrent ? ": recurrent)" : ": chunked)");
    auto run = [&](GatedDelta2Kernels kernels) {
      Tensor st;
      const Tensor o = ops::gated_delta_rule2(q, k, v, g, b, w, scale, s0, &st, nullptr, kernels);
      const ops::GatedDelta2Grads d =
          ops::gated_delta_rule2_backward(dout, q, k, v, g, b, w, scale, s0, Tensor(), Tensor(), kernels);
      return std::vector<Tensor>{o, st, d.dq, d.dk, d.dg, d.db};
    };
    const std::vector<Tensor> a = run(GatedDelta2Kernels::automatic), e = run(expected);
    const char* names[] = {"o", "state_out", "dq", "dk", "dg", "db"};
    for (size_t i = 0; i < a.size(); ++i) {
      const bool summed_then_rounded = recurrent && (i == 2 || i == 3);  // dq, dk
      if (summed_then_rounded)
        expect_within_one_bf16_ulp(a[i], e[i], names[i] + what);
      else
        test::expect_close(test::cpu_f64(a[i]), test::cpu_f64(e[i]), 1e-6, 1e-5, names[i] + what);
    }
    test::expect_error(
        [&] {
          ops::gated_delta_rule2(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), g, b, w, scale, s0, nullptr,
                                 nullptr, GatedDelta2Kernels::chunked);
        },
        {"gated_delta_rule2", "chunked kernels", "bf16"});
  }
}

// A forward that keeps its chunk scratch (the autograd node's path) gives the output of one that does not, and the
// backward reading that scratch instead of recomputing it gives the same gradients (the same kernels on the same
// values: 1e-6 leaves room only for nothing), at both head dims; a scratch of other sizes is refused by name.
TEST(GatedDeltaRule2Cuda, KeptScratchGivesTheSameResults) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const auto [T, D] : {std::array<int64_t, 2>{150, 128}, std::array<int64_t, 2>{67, 64}}) {
    const double scale = 1.0 / std::sqrt(double(D));
    const GpuInputs in(2, T, 2, D, seed);
    const Tensor &q = in.q, &k = in.k, &v = in.v, &g = in.g, &b = in.b, &w = in.w, &s0 = in.s0, &dout = in.dout,
                 &ds = in.ds;
    Tensor st_plain, st_kept, kept;
    test::poison_pool();
    const Tensor o_plain = ops::gated_delta_rule2(q, k, v, g, b, w, scale, s0, &st_plain);
    test::poison_pool();
    const Tensor o_kept = ops::gated_delta_rule2(q, k, v, g, b, w, scale, s0, &st_kept, &kept);
    ASSERT_TRUE(kept.defined());
    const std::string shape = " T " + std::to_string(T) + " D " + std::to_string(D);
    test::expect_close(test::cpu_f64(o_kept), test::cpu_f64(o_plain), 1e-6, 1e-5, "o" + shape);
    test::expect_close(test::cpu_f64(st_kept), test::cpu_f64(st_plain), 1e-6, 1e-5, "state_out" + shape);
    test::poison_pool();
    const ops::GatedDelta2Grads x = ops::gated_delta_rule2_backward(dout, q, k, v, g, b, w, scale, s0, ds);
    test::poison_pool();
    const ops::GatedDelta2Grads y = ops::gated_delta_rule2_backward(dout, q, k, v, g, b, w, scale, s0, ds, kept);
    const std::pair<const char*, std::pair<Tensor, Tensor>> grads[] = {{"dq", {x.dq, y.dq}},
                                                                       {"dk", {x.dk, y.dk}},
                                                                       {"dv", {x.dv, y.dv}},
                                                                       {"dg", {x.dg, y.dg}},
                                                                       {"db", {x.db, y.db}},
                                                                       {"dw", {x.dw, y.dw}},
                                                                       {"dstate_in", {x.dstate_in, y.dstate_in}}};
    for (const auto& [name, pair] : grads)
      test::expect_close(test::cpu_f64(pair.second), test::cpu_f64(pair.first), 1e-6, 1e-5, name + shape);
    // The same sequences with one head: a scratch of half the size, which the backward must refuse.
    auto one_head = [](const Tensor& t) { return t.slice(2, 0, 1).contiguous(); };
    test::expect_error(
        [&] {
          ops::gated_delta_rule2_backward(one_head(dout), one_head(q), one_head(k), one_head(v), one_head(g),
                                          one_head(b), one_head(w), scale, s0.slice(1, 0, 1).contiguous(),
                                          ds.slice(1, 0, 1).contiguous(), kept);
        },
        {"gated_delta_rule2_backward", "kept_scratch"});
  }
}

TEST(GatedDeltaRule2CudaErrors, KeyDimAtMost128AndGatesInF32) {
  PRIMER_REQUIRE_CUDA();
  const test::Gdn2Inputs in = test::gdn2_inputs(1, 3, 1, 160, 4, 1);
  auto gpu = [](const Tensor& t, DType dt) { return t.to(dt).to(Device::cuda()); };
  const DType f32 = DType::F32;
  test::expect_error(
      [&] {
        ops::gated_delta_rule2(gpu(in.q, f32), gpu(in.k, f32), gpu(in.v, f32), gpu(in.g, f32), gpu(in.b, f32),
                               gpu(in.w, f32), 1.0, Tensor(), nullptr);
      },
      {"gated_delta_rule2", "at most 128"});
  const test::Gdn2Inputs small = test::gdn2_inputs(1, 3, 1, 8, 4, 1);
  test::expect_error(
      [&] {
        ops::gated_delta_rule2(gpu(small.q, DType::BF16), gpu(small.k, DType::BF16), gpu(small.v, DType::BF16),
                               gpu(small.g, DType::BF16), gpu(small.b, f32), gpu(small.w, f32), 1.0, Tensor(), nullptr);
      },
      {"gated_delta_rule2", "'g'"});
}

}  // namespace
}  // namespace primer
