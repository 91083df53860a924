// The chunked CUDA GLA against the f64 reference on the same (rounded) inputs: forward o and the final state, and
// every gradient (dq, dk, dv, dg, dstate_in) with a gradient flowing into the final state; bf16 and f32 I/O,
// K, V ∈ {64, 128}, T ∈ {1, 5, 64, 100, 200, 1000} (partial last chunks included), with and without an initial
// state, scale 1 (Mamba-2) and K^-1/2 (GKA); outputs poisoned. Also the precise (f32, hi + lo) query on a query
// much larger off the keys' span than along it (and the forward's operands reused by the backward), two calls
// carrying the state against one call, and the errors for head dims and for operands of other inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>

#include "core/ops/gla.h"
#ifdef PRIMER_WITH_CUDA
#include "core/ops/cuda/gla_scan.h"
#endif
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

struct Case {
  int64_t T, K, V;
  bool with_state;
  double scale;
};

const Case kCases[] = {
    {1, 64, 64, false, 0.125},  {5, 128, 128, true, 1.0},      {64, 64, 128, true, 0.125},
    {100, 128, 64, false, 1.0}, {200, 128, 128, true, 0.0884}, {1000, 64, 64, true, 1.0},
};

std::string describe(const Case& c, DType dtype) {
  return fmt::format("{} T {} K {} V {} state {} scale {}", dtype_name(dtype), c.T, c.K, c.V, c.with_state, c.scale);
}

// Outputs are allocated inside the op: poisoning a same-sized block just before and releasing it makes the
// stream-ordered pool hand that NaN-filled memory to the op, so an element a kernel forgets to write shows up.
void poison_next_allocation(const Shape& shape, DType dtype) {
  test::poison(Tensor::empty(shape, dtype, Device::cuda()));
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector<double>()) m = std::max(m, std::abs(x));
  return m;
}

// Relative L2 within `rel` and every element within `elem` of the largest reference magnitude.
// Prints the measured errors (the log backs the tolerances' justification).
void expect_match(const Tensor& gpu, const Tensor& ref, double rel, double elem, const std::string& what) {
  const test::Diff d = test::compare(gpu, ref);
  std::printf("  %-58s rel L2 %.2e   max abs / max |ref| %.2e\n", what.c_str(), d.rel_l2,
              d.max_abs / std::max(max_abs(ref), 1e-30));
  test::expect_close(gpu, ref, rel, elem * max_abs(ref) + 1e-6, what);
}

// dg in relative L2, except where it vanishes analytically (a single token from a zero state); there the kernel's
// q·dq − k·dk + ∂/∂G_L cancels up to the bf16 operands' rounding, bounded relative to the mean row size Σ_i |k_i dk_i|.
void expect_dg_match(const Tensor& dg, const Tensor& ref, const Tensor& ref_dk, const Tensor& k, double rel,
                     double elem, const std::string& what) {
  if (max_abs(ref) > 0) return expect_match(dg, ref, rel, elem, what);
  const auto dk = ref_dk.to_vector<double>(), kv = test::cpu_f64(k).to_vector<double>();
  double terms = 0;
  for (size_t i = 0; i < dk.size(); ++i) terms += std::abs(dk[i] * kv[i]);
  terms /= double(ref.numel());
  const test::Diff d = test::compare(dg, ref);
  std::printf("  %-58s max abs %.2e   mean row |k·dk| %.2e\n", what.c_str(), d.max_abs, terms);
  test::expect_close(dg, ref, std::numeric_limits<double>::infinity(), rel * terms, what + " (zero)");
}

TEST(GlaCuda, ForwardAndBackwardMatchTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr int64_t B = 2, H = 2;
  for (DType dtype : {DType::BF16, DType::F32})
    for (const Case& c : kCases) {
      const std::string what = describe(c, dtype);
      SCOPED_TRACE(what);
      const Tensor q = test::random_on_cuda({B, c.T, H, c.K}, seed + 1, dtype);
      const Tensor k = test::random_on_cuda({B, c.T, H, c.K}, seed + 2, dtype, 1.0 / std::sqrt(double(c.K)));
      const Tensor v = test::random_on_cuda({B, c.T, H, c.V}, seed + 3, dtype);
      // Log decays of Mamba-2's range: −exp(A_log)·softplus(dt) spans ~−1e-3 … −1.6; U(−1, 0) per token.
      const Tensor g = test::rand_uniform({B, c.T, H}, seed + 4, -1.0, 0.0, DType::F32).to(Device::cuda());
      const Tensor s0 = c.with_state ? test::random_on_cuda({B, H, c.K, c.V}, seed + 5, DType::F32) : Tensor();
      const Tensor dout = test::random_on_cuda({B, c.T, H, c.V}, seed + 6, dtype);
      const Tensor dsT = test::random_on_cuda({B, H, c.K, c.V}, seed + 7, DType::F32);
      auto ref = [](const Tensor& t) { return t.defined() ? test::cpu_f64(t) : Tensor(); };

      Tensor st, rst;
      poison_next_allocation(v.shape(), dtype);
      const Tensor o = ops::gla(q, k, v, g, c.scale, s0, &st);
      const Tensor ro = ops::reference::gla(ref(q), ref(k), ref(v), ref(g), c.scale, ref(s0), &rst);
      // Every product takes bf16 operands with fp32 accumulation: the decayed scores P and keys w ⊙ k and the
      // chunk-boundary states are rounded to bf16 (2^-9 relative each) and o is rounded to bf16; the rounding errors
      // are independent, so sums over 64–200 terms keep the relative L2 near 2^-9·√3 ≈ 3.5e-3 (f32 inputs are
      // rounded to bf16 for the tensor cores: same order; measured ≤ 3.4e-3 for o). 1e-2 relative L2, and each
      // element within 2e-2 of max |o|.
      expect_match(o, ro, 1e-2, 2e-2, "o " + what);
      // The state is carried in fp32 registers; only its update's operands are bf16.
      expect_match(st, rst, 1e-2, 2e-2, "state_out " + what);

      poison_next_allocation(q.shape(), dtype);
      const ops::GlaGrads d = ops::gla_backward(dout, q, k, v, g, c.scale, s0, dsT);
      const ops::GlaGrads rd =
          ops::reference::gla_backward(ref(dout), ref(q), ref(k), ref(v), ref(g), c.scale, ref(s0), ref(dsT));
      // The same operand roundings (scores, dscores and both chunk-boundary states in bf16) and the bf16 output:
      // as for o.
      expect_match(d.dq, rd.dq, 1e-2, 2e-2, "dq " + what);
      expect_match(d.dk, rd.dk, 1e-2, 2e-2, "dk " + what);
      expect_match(d.dv, rd.dv, 1e-2, 2e-2, "dv " + what);
      ASSERT_EQ(d.dstate_in.defined(), c.with_state);
      if (c.with_state) expect_match(d.dstate_in, rd.dstate_in, 1e-2, 2e-2, "dstate_in " + what);
      // dg_s sums q·dq − k·dk over the rest of the chunk plus e^{G_L}<dE, S>: differences of terms each as accurate
      // as dq and dk, without systematic cancellation for these inputs (measured ≤ 4.2e-3): as for dq.
      expect_dg_match(d.dg, rd.dg, rd.dk, k, 1e-2, 2e-2, "dg " + what);
    }
}

// Rows of a random K x K orthonormal basis (Gram–Schmidt on Gaussian rows, f64).
std::vector<std::vector<double>> random_basis(int64_t K, uint64_t seed) {
  const std::vector<double> g = test::randn({K, K}, seed).to_vector<double>();
  std::vector<std::vector<double>> rows;
  for (int64_t i = 0; i < K; ++i) {
    std::vector<double> r(g.begin() + i * K, g.begin() + (i + 1) * K);
    for (const auto& b : rows) {
      double dot = 0;
      for (int64_t j = 0; j < K; ++j) dot += r[j] * b[j];
      for (int64_t j = 0; j < K; ++j) r[j] -= dot * b[j];
    }
    double n = 0;
    for (double x : r) n += x * x;
    for (double& x : r) x /= std::sqrt(n);
    rows.push_back(r);
  }
  return rows;
}

// [B, T, H, K] rows Σ_i c_i b_i over the basis rows b_i: coefficients N(0, 1) on the first `span` rows and
// N(0, off²) on the others.
Tensor in_basis(const std::vector<std::vector<double>>& basis, const Shape& shape, int64_t span, double off,
                uint64_t seed) {
  const int64_t K = shape[3], rows = shape[0] * shape[1] * shape[2];
  const std::vector<double> c = test::randn({rows, K}, seed).to_vector<double>();
  std::vector<double> out(size_t(rows * K), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < K; ++i) {
      const double w = c[r * K + i] * (i < span ? 1.0 : off);
      if (w == 0) continue;
      for (int64_t j = 0; j < K; ++j) out[r * K + j] += w * basis[i][j];
    }
  return Tensor::from_vector(out, shape, DType::F64);
}

// Gated KalmaNet's readout query q̃ is much larger off the keys' span than along it, and only the part along it
// reaches o, dv (through q·k) and dg (through q·dq). Here the keys span 8 directions of a random basis and q is 100×
// larger off that span than along it (no initial state, whose full rank would see all of q). As one bf16, q errs by
// 2^-8/√12 ≈ 1.1e-3 (RMS) of its large part, of which the fraction √(8/K) falls in the span: ~1.1e-3·100·√(8/K) =
// 2.8e-2 (K = 128) to 3.9e-2 (K = 64) of what o sees, and the chunk states' rounding, off the span, meets q's large
// part the same way (measured 0.15 on o). In f32 the query and the states enter as hi + lo (~2^-17 · 100), keys and
// values being bf16 values here (what a bf16 layer makes): 1e-2 as in the test above, on every output. The bf16 run on
// the same values must miss that bound on o, or the case does not test the precision.
TEST(GlaCuda, PreciseQueryKeepsThePartAlongTheKeys) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr int64_t B = 1, T = 200, H = 2, V = 128, kSpan = 8;
  for (const int64_t K : {int64_t(64), int64_t(128)}) {
    SCOPED_TRACE("K " + std::to_string(K));
    const auto basis = random_basis(K, seed + 1);
    const double scale = 1.0 / std::sqrt(double(K));
    const Tensor q64 = in_basis(basis, {B, T, H, K}, kSpan, 100.0, seed + 2);
    const Tensor k = in_basis(basis, {B, T, H, K}, kSpan, 0.0, seed + 3).to(DType::BF16);
    const Tensor v = test::randn({B, T, H, V}, seed + 4).to(DType::BF16);
    const Tensor g = test::rand_uniform({B, T, H}, seed + 5, -0.2, 0.0, DType::F32).to(Device::cuda());
    const Tensor dout = test::randn({B, T, H, V}, seed + 6).to(DType::BF16);
    const Tensor dsT = test::random_on_cuda({B, H, K, V}, seed + 7, DType::F32);
    auto on_cuda = [](const Tensor& t, DType dtype) { return t.to(dtype).to(Device::cuda()); };
    const Tensor q = on_cuda(q64, DType::F32);
    auto ref = [](const Tensor& t) { return test::cpu_f64(t); };
    const std::string what = "precise query, K " + std::to_string(K);

    poison_next_allocation(v.shape(), DType::F32);
    const Tensor o = ops::gla(q, on_cuda(k, DType::F32), on_cuda(v, DType::F32), g, scale, Tensor(), nullptr);
    const Tensor ro = ops::reference::gla(ref(q), ref(k), ref(v), ref(g), scale, Tensor(), nullptr);
    expect_match(o, ro, 1e-2, 2e-2, "o, " + what);
    poison_next_allocation(q.shape(), DType::F32);
    const ops::GlaGrads d = ops::gla_backward(on_cuda(dout, DType::F32), q, on_cuda(k, DType::F32),
                                              on_cuda(v, DType::F32), g, scale, Tensor(), dsT);
    const ops::GlaGrads rd =
        ops::reference::gla_backward(ref(dout), ref(q), ref(k), ref(v), ref(g), scale, Tensor(), ref(dsT));
    expect_match(d.dq, rd.dq, 1e-2, 2e-2, "dq, " + what);
    expect_match(d.dk, rd.dk, 1e-2, 2e-2, "dk, " + what);
    expect_match(d.dv, rd.dv, 1e-2, 2e-2, "dv, " + what);
    expect_dg_match(d.dg, rd.dg, rd.dk, k, 1e-2, 2e-2, "dg, " + what);

    // The layer's form: the readout written in bf16 by the kernel (o's rounding, one bf16 step: 2^-8 relative), and
    // its bf16 gradient, which the op passes on as the kernels' operand unchanged (the f32 one above is rounded to
    // the very same values): identical gradients.
    poison_next_allocation(v.shape(), DType::BF16);
    const Tensor o_bf16 =
        ops::gla(q, on_cuda(k, DType::F32), on_cuda(v, DType::F32), g, scale, Tensor(), nullptr, DType::BF16);
    ASSERT_EQ(o_bf16.dtype(), DType::BF16);
    test::expect_close(o_bf16, o.to(DType::BF16), std::ldexp(1.0, -8), 1e-30, "bf16 o against f32 o rounded, " + what);
    const ops::GlaGrads d_bf16 = ops::gla_backward(on_cuda(dout, DType::BF16), q, on_cuda(k, DType::F32),
                                                   on_cuda(v, DType::F32), g, scale, Tensor(), dsT);
    for (auto [name, a, b] : {std::tuple{"dq", &d_bf16.dq, &d.dq}, std::tuple{"dk", &d_bf16.dk, &d.dk},
                              std::tuple{"dv", &d_bf16.dv, &d.dv}, std::tuple{"dg", &d_bf16.dg, &d.dg}})
      test::expect_close(*a, *b, 0, 0, std::string(name) + " from a bf16 dout, " + what);

    // The forward's operands (k and v rounded, q split into hi + lo) handed to the backward, as ag::gla does: the
    // kernels read the very same values, so the same gradients, bit for bit.
    ops::GlaOperands operands;
    ops::gla(q, on_cuda(k, DType::F32), on_cuda(v, DType::F32), g, scale, Tensor(), nullptr, DType::BF16, &operands);
    ASSERT_TRUE(operands.defined() && operands.q_lo.defined()) << "an f32 query's operands are hi + lo";
    const ops::GlaGrads d_kept = ops::gla_backward(on_cuda(dout, DType::BF16), q, on_cuda(k, DType::F32),
                                                   on_cuda(v, DType::F32), g, scale, Tensor(), dsT, &operands);
    for (auto [name, a, b] : {std::tuple{"dq", &d_kept.dq, &d_bf16.dq}, std::tuple{"dk", &d_kept.dk, &d_bf16.dk},
                              std::tuple{"dv", &d_kept.dv, &d_bf16.dv}, std::tuple{"dg", &d_kept.dg, &d_bf16.dg}})
      test::expect_close(*a, *b, 0, 0, std::string(name) + " from the forward's operands, " + what);

    // Operands handed to the forward by the inputs' producers are what the kernels read: the keys' operand of other
    // keys (a bf16-valued k2 in f32: its rounding is itself) gives k2's readout, bit for bit, from these f32 keys.
    const Tensor k2 = on_cuda(in_basis(basis, {B, T, H, K}, kSpan, 0.0, seed + 8).to(DType::BF16), DType::F32);
    ops::GlaOperands given{.k = k2.to(DType::BF16)};
    const Tensor o_given =
        ops::gla(q, on_cuda(k, DType::F32), on_cuda(v, DType::F32), g, scale, Tensor(), nullptr, DType::BF16, &given);
    test::expect_close(o_given, ops::gla(q, k2, on_cuda(v, DType::F32), g, scale, Tensor(), nullptr, DType::BF16), 0, 0,
                       "o from a handed key operand, " + what);
    ASSERT_TRUE(given.defined() && given.q_lo.defined()) << "the forward completes the handed operands";

    const Tensor coarse = ops::gla(on_cuda(q64, DType::BF16), on_cuda(k, DType::BF16), on_cuda(v, DType::BF16), g,
                                   scale, Tensor(), nullptr);
    const double coarse_error = test::compare(coarse, ro).rel_l2;
    std::printf("  bf16: o rel L2 %.2e\n", coarse_error);
    EXPECT_GT(coarse_error, 1e-2) << "the inputs no longer separate bf16 from the precise query";
  }
}

// The precise path's products within a chunk, on inputs that are bf16 values (what a bf16 layer makes, passed as
// f32): one chunk (60 tokens) from a zero state, so dq = Σ_j dA_rj k_j, dk = e^{G_L−G_j} dE v_j + Σ_r dA_rj q_r and
// dg come from q, k, v and dout entering the tensor cores exactly and dA and dE = dstate_out as hi + lo pairs
// (2^-17): f32 sums, ~1e-6 off f64. dA as one bf16 (2^-9 per score, the kernel before 2026-11-29) puts them ~1e-3
// off (2^-9/√3 per term, independent across the sum), and dg's terms q·dq − k·dk cancel: Gated KalmaNet's gate
// gradients, sums of dg over tokens, were up to 5.5e-2 off f64 in GkaMixerCuda.Bf16LayerAtTheDefaultRidge. (Across
// chunks the states enter through the decayed keys as one bf16 each: 2e-4 on dq over 200 tokens, measured.) dv keeps
// A as one bf16 (it meets no such cancellation): the bf16 bound of ForwardAndBackwardMatchTheF64Reference.
TEST(GlaCuda, PreciseGradientsOfBf16Values) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr int64_t B = 1, T = 60, H = 2, V = 128;
  for (const int64_t K : {int64_t(64), int64_t(128)}) {
    SCOPED_TRACE("K " + std::to_string(K));
    const std::string what = "bf16 values as f32, K " + std::to_string(K);
    const double scale = 1.0 / std::sqrt(double(K));
    auto bf16_values = [](const Tensor& t) { return t.to(DType::BF16).to(DType::F32).to(Device::cuda()); };
    const Tensor q = bf16_values(test::randn({B, T, H, K}, seed + 1));
    const Tensor k = bf16_values(test::randn({B, T, H, K}, seed + 2, DType::F64, Device::cpu(), scale));
    const Tensor v = bf16_values(test::randn({B, T, H, V}, seed + 3));
    const Tensor g = test::rand_uniform({B, T, H}, seed + 4, -0.5, 0.0, DType::F32).to(Device::cuda());
    const Tensor dout = bf16_values(test::randn({B, T, H, V}, seed + 5));
    const Tensor dsT = test::random_on_cuda({B, H, K, V}, seed + 6, DType::F32);
    auto ref = [](const Tensor& t) { return test::cpu_f64(t); };
    poison_next_allocation(q.shape(), DType::F32);
    const ops::GlaGrads d = ops::gla_backward(dout, q, k, v, g, scale, Tensor(), dsT);
    const ops::GlaGrads rd =
        ops::reference::gla_backward(ref(dout), ref(q), ref(k), ref(v), ref(g), scale, Tensor(), ref(dsT));
    expect_match(d.dq, rd.dq, 1e-4, 2e-4, "dq, " + what);
    expect_match(d.dk, rd.dk, 1e-4, 2e-4, "dk, " + what);
    expect_dg_match(d.dg, rd.dg, rd.dk, k, 1e-4, 2e-4, "dg, " + what);
    expect_match(d.dv, rd.dv, 1e-2, 2e-2, "dv, " + what);
  }
}

TEST(GlaCuda, TwoCallsCarryingTheStateEqualOneCall) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr int64_t T = 300, T1 = 100, H = 2, K = 128, V = 64;
  auto input = [&](int64_t width, uint64_t s, double std) {
    return test::random_on_cuda({1, T, H, width}, s, DType::BF16, std);
  };
  const Tensor q = input(K, seed + 1, 1.0), k = input(K, seed + 2, 1.0 / std::sqrt(double(K))),
               v = input(V, seed + 3, 1.0);
  const Tensor g = test::rand_uniform({1, T, H}, seed + 4, -0.2, 0.0, DType::F32).to(Device::cuda());
  auto part = [](const Tensor& t, int64_t a, int64_t b) { return t.slice(1, a, b).contiguous(); };
  Tensor st_full, st1, st2;
  const Tensor o = ops::gla(q, k, v, g, 1.0, Tensor(), &st_full);
  const Tensor o1 = ops::gla(part(q, 0, T1), part(k, 0, T1), part(v, 0, T1), part(g, 0, T1), 1.0, Tensor(), &st1);
  const Tensor o2 = ops::gla(part(q, T1, T), part(k, T1, T), part(v, T1, T), part(g, T1, T), 1.0, st1, &st2);
  // The two runs split the chunks differently, so their bf16 roundings differ (2^-9 relative each): 1e-2.
  expect_match(o1, part(o, 0, T1), 1e-2, 2e-2, "o of the first call");
  expect_match(o2, part(o, T1, T), 1e-2, 2e-2, "o of the second call");
  expect_match(st2, st_full, 1e-2, 2e-2, "final state");
}

#ifdef PRIMER_WITH_CUDA
// The sequential state pass with 32 value columns per block computes what 64 columns per block do (the same
// products in the same order per element), forward and reverse jobs in one launch, through the launcher directly.
TEST(GlaCuda, ScanSlicesAgree) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const int64_t K : {int64_t(64), int64_t(128)}) {
    const int64_t B = 2, T = 150, H = 3, V = 128;
    const ops::GlaDims d{B, T, H, K, V};
    const int64_t chunks = ops::gla_chunks(d);
    const Tensor a = test::random_on_cuda({B, T, H, K}, seed + 1, DType::BF16);
    const Tensor b = test::random_on_cuda({B, T, H, V}, seed + 2, DType::BF16);
    const Tensor init = test::random_on_cuda({B, H, K, V}, seed + 3, DType::F32);
    const Tensor g = test::rand_uniform({B, T, H}, seed + 4, -0.2, 0.0, DType::F32).to(Device::cuda());
    auto run = [&](int slice) {
      std::vector<Tensor> out;
      for (int i = 0; i < 4; ++i) {
        out.push_back(i % 2 == 0 ? Tensor::empty({B, H, chunks, K, V}, DType::BF16, Device::cuda())
                                 : Tensor::empty({B, H, K, V}, DType::F32, Device::cuda()));
        test::poison(out.back());
      }
      const ops::cuda_ops::GlaScanJob jobs[2] = {
          {a.data_ptr(), b.data_ptr(), init.data<float>(), out[0].data_ptr(), out[1].data<float>(), false},
          {a.data_ptr(), b.data_ptr(), init.data<float>(), out[2].data_ptr(), out[3].data<float>(), true}};
      ops::cuda_ops::gla_state_scans(d, g.data<float>(), 0.5f, jobs, 2, slice);
      for (Tensor& t : out) t = test::cpu_f64(t);
      return out;
    };
    const std::vector<Tensor> wide = run(64), narrow = run(32);
    const char* names[] = {"forward states", "S_T", "reverse states", "dS_0"};
    for (size_t i = 0; i < wide.size(); ++i)
      test::expect_close(narrow[i], wide[i], 1e-6, 1e-5, names[i] + std::string(" K ") + std::to_string(K));
  }
}
#endif

TEST(GlaCuda, RejectsUnsupportedHeadDims) {
  PRIMER_REQUIRE_CUDA();
  const Tensor q = test::random_on_cuda({1, 4, 2, 32}, test::fresh_seed(), DType::BF16);
  const Tensor g = Tensor::zeros({1, 4, 2}, DType::F32, Device::cuda());
  test::expect_error([&] { ops::gla(q, q, q, g, 1.0, Tensor(), nullptr); }, {"gla", "K and V of 64 or 128"});
}

// Operands handed to the forward or the backward must be of the same inputs: others (here of a shorter sequence, and
// a bf16 query's without the lo half for an f32 query) are refused with the operand named, and so are any for CPU
// inputs (they are the CUDA kernels').
TEST(GlaCuda, RejectsOperandsOfOtherInputs) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  auto input = [&](int64_t T, uint64_t s, DType dtype) { return test::random_on_cuda({1, T, 2, 64}, s, dtype); };
  const Tensor q = input(70, seed + 1, DType::F32), k = input(70, seed + 2, DType::F32);
  const Tensor g = Tensor::zeros({1, 70, 2}, DType::F32, Device::cuda());
  const Tensor dout = input(70, seed + 3, DType::F32);
  ops::GlaOperands shorter, of_bf16;
  const Tensor q_short = input(64, seed + 4, DType::F32);
  ops::gla(q_short, q_short, q_short, g.slice(1, 0, 64).contiguous(), 1.0, Tensor(), nullptr, std::nullopt, &shorter);
  const Tensor qb = q.to(DType::BF16), kb = k.to(DType::BF16);
  ops::gla(qb, kb, kb, g, 1.0, Tensor(), nullptr, std::nullopt, &of_bf16);
  test::expect_error([&] { ops::gla_backward(dout, q, k, k, g, 1.0, Tensor(), Tensor(), &shorter); },
                     {"gla_backward", "operands.q_hi", "[1, 70, 2, 64]"});
  test::expect_error([&] { ops::gla_backward(dout, q, k, k, g, 1.0, Tensor(), Tensor(), &of_bf16); },
                     {"gla_backward", "operands.q_lo", "undefined"});
  ops::GlaOperands given_short = shorter;
  test::expect_error([&] { ops::gla(q, k, k, g, 1.0, Tensor(), nullptr, std::nullopt, &given_short); },
                     {"gla", "operands.q_hi", "[1, 70, 2, 64]"});
  ops::GlaOperands keys_only{.k = kb};
  const Tensor qc = q.to(Device::cpu()), kc = k.to(Device::cpu()), gc = g.to(Device::cpu());
  test::expect_error([&] { ops::gla(qc, kc, kc, gc, 1.0, Tensor(), nullptr, std::nullopt, &keys_only); },
                     {"gla", "operands are given for CPU inputs"});
}

}  // namespace
}  // namespace primer
