// The chunked CUDA GLA against the f64 reference on the same (rounded) inputs: forward o and the final state, and
// every gradient (dq, dk, dv, dg, dstate_in) with a gradient flowing into the final state; bf16 and f32 I/O,
// K, V ∈ {64, 128}, T ∈ {1, 5, 64, 100, 200, 1000} (partial last chunks included), with and without an initial
// state, scale 1 (Mamba-2) and K^-1/2 (GKA); outputs poisoned. Also two calls carrying the state against one call,
// and the head-dim error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

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

}  // namespace
}  // namespace primer
