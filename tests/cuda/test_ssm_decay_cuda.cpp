// ops::ssm_decay on CUDA against the f64 CPU reference on the very inputs the GPU saw: a in bf16 and f32, f32
// parameters, per head (Mamba-2/GDN/GKA) and per head and channel (GDN-2), gradients through g and Δ together and
// through g alone, with poisoned outputs.
//
// Tolerances (tests/cuda/parity_util.h): g, Δ and the per-element gradient are a few f32 operations (expf, log1pf
// within 2 ulp) from the same inputs: f32 1e-5, and da rounded to bf16 4e-3 where a is bf16. The parameter
// gradients are f32 sums over up to ~600 rows in another order than the CPU's: twice the f32 bound.
#include <gtest/gtest.h>

#include <string>

#include "core/ops/ssm_decay.h"
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

struct Layout {
  std::string name;
  Shape a, A_log, dt_bias;
};

TEST(SsmDecayCuda, MatchesTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  const std::vector<Layout> layouts = {
      {"per_head", {4, 151, 16}, {16}, {16}},
      {"per_channel", {2, 37, 4, 8}, {4}, {4, 8}},
      {"odd", {3, 7, 3}, {3}, {3}},
  };
  for (const Layout& l : layouts)
    for (const DType dt : {DType::BF16, DType::F32})
      for (const bool with_delta : {true, false}) {
        SCOPED_TRACE(l.name + " " + dtype_name(dt) + (with_delta ? " g and delta" : " g alone") + " seed " +
                     std::to_string(seed));
        const Tensor a = test::random_on_cuda(l.a, seed, dt, 3.0);
        const Tensor A_log = test::random_on_cuda(l.A_log, seed + 1, DType::F32);
        const Tensor dt_bias = test::random_on_cuda(l.dt_bias, seed + 2, DType::F32);
        const Tensor dg = test::random_on_cuda(l.a, seed + 3, DType::F32);
        const Tensor ddelta = with_delta ? test::random_on_cuda(l.a, seed + 4, DType::F32) : Tensor();
        auto ref = [](const Tensor& t) { return t.defined() ? test::cpu_f64(t) : Tensor(); };

        Tensor delta, delta_ref;
        test::poison_pool();
        const Tensor g = ops::ssm_decay(a, A_log, dt_bias, with_delta ? &delta : nullptr);
        const Tensor g_ref = ops::ssm_decay(ref(a), ref(A_log), ref(dt_bias), &delta_ref);
        test::expect_parity(g, g_ref, "g");
        if (with_delta) test::expect_parity(delta, delta_ref, "delta");

        test::poison_pool();
        const ops::SsmDecayGrads grads = ops::ssm_decay_backward(dg, ddelta, a, A_log, dt_bias);
        const ops::SsmDecayGrads grads_ref =
            ops::ssm_decay_backward(ref(dg), ref(ddelta), ref(a), ref(A_log), ref(dt_bias));
        test::expect_parity(grads.da, grads_ref.da, "da");
        test::expect_parity(grads.dA_log, grads_ref.dA_log, "dA_log", 2.0);
        test::expect_parity(grads.ddt_bias, grads_ref.ddt_bias, "ddt_bias", 2.0);
      }
}

}  // namespace
}  // namespace primer
