// The fused CUDA lse_merge against the f64 reference on the same rounded inputs, bf16 and f32 outputs, with rows
// where part b sees no key (lse_b = −inf, as B'MOJO-F's fading window before its first W tokens), rows where either
// part dominates by far (|lse_b − lse_a| up to 60) and views as inputs. Tolerances: the output rounds once to its
// dtype (parity_tolerance: 4e-3 bf16, 1e-5 f32) after f32 weights; the merged lse is f32 arithmetic on O(10) values,
// 1e-6 relative.
#include <gtest/gtest.h>

#include <limits>

#include "core/ops/lse_merge.h"
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

TEST(LseMergeCuda, MatchesTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T = 37, H = 3, Dh = 80;
  for (const DType dtype : {DType::BF16, DType::F32}) {
    const Tensor out_a = test::random_on_cuda({B, T, H, Dh}, seed + 1, dtype),
                 out_b = test::random_on_cuda({B, T, H, Dh}, seed + 2, dtype);
    Tensor la = test::randn({B, H, T}, seed + 3, DType::F64, Device::cpu(), 20.0),
           lb = test::randn({B, H, T}, seed + 4, DType::F64, Device::cpu(), 20.0);
    for (int64_t r = 0; r < B * H * T; r += 5) lb.data<double>()[r] = -std::numeric_limits<double>::infinity();
    const Tensor lse_a = la.to(DType::F32).to(Device::cuda()), lse_b = lb.to(DType::F32).to(Device::cuda());
    Tensor lse, ref_lse;
    const Tensor out = ops::lse_merge(out_a, lse_a, out_b, lse_b, &lse);
    const Tensor ref = ops::reference::lse_merge(test::cpu_f64(out_a), test::cpu_f64(lse_a), test::cpu_f64(out_b),
                                                 test::cpu_f64(lse_b), &ref_lse);
    EXPECT_EQ(out.dtype(), dtype);
    test::expect_parity(out, ref, dtype == DType::BF16 ? "out (bf16)" : "out (f32)");
    test::expect_close(lse, ref_lse, 1e-6, 1e-5, "lse");
    // Views: out_b as a slice of a wider tensor, lse_a transposed back from [B, T, H].
    const Tensor wide = test::random_on_cuda({B, T, H, 2 * Dh}, seed + 5, dtype);
    const Tensor b_view = wide.slice(3, Dh, 2 * Dh);
    const Tensor lse_a_view = lse_a.permute({0, 2, 1}).contiguous().permute({0, 2, 1});
    const Tensor from_views = ops::lse_merge(out_a, lse_a_view, b_view, lse_b, nullptr);
    const Tensor ref_views = ops::reference::lse_merge(
        test::cpu_f64(out_a), test::cpu_f64(lse_a), test::cpu_f64(b_view.contiguous()), test::cpu_f64(lse_b), nullptr);
    test::expect_parity(from_views, ref_views, "out from views");
  }
}

}  // namespace
}  // namespace primer
