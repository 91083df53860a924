// ops::repeat_interleave (grouped-query heads handed to each head of their group) against its definition element by
// element, ops::sum_repeats as its adjoint (⟨repeat(x), y⟩ = ⟨x, sum_repeats(y)⟩ in f64), and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/ops/repeat_interleave.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

TEST(RepeatInterleave, CopiesEachSliceInPlaceAndSumsBackAsItsAdjoint) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t A = 2, N = 3, R = 4, C = 5;
  const Tensor x = test::randn({A, N, C}, seed), y = test::randn({A, N * R, C}, seed + 1);
  const Tensor repeated = ops::repeat_interleave(x, 1, R), summed = ops::sum_repeats(y, -2, R);
  ASSERT_EQ(repeated.shape(), Shape({A, N * R, C}));
  ASSERT_EQ(summed.shape(), Shape({A, N, C}));
  const auto xv = x.to_vector<double>(), yv = y.to_vector<double>(), rv = repeated.to_vector<double>(),
             sv = summed.to_vector<double>();
  double lhs = 0, rhs = 0;
  for (int64_t a = 0; a < A; ++a)
    for (int64_t j = 0; j < N * R; ++j)
      for (int64_t c = 0; c < C; ++c) {
        const size_t at = size_t((a * N * R + j) * C + c);
        EXPECT_EQ(rv[at], xv[size_t((a * N + j / R) * C + c)]) << "slice " << j;
        lhs += rv[at] * yv[at];
      }
  for (size_t i = 0; i < xv.size(); ++i) rhs += xv[i] * sv[i];
  EXPECT_NEAR(lhs, rhs, 1e-12 * (std::abs(lhs) + 1));
  EXPECT_EQ(ops::repeat_interleave(x, 1, 1).data_ptr(), x.data_ptr());  // one copy: x itself
  test::expect_error([&] { ops::repeat_interleave(x, 3, 2); }, {"repeat_interleave", "dim 3"});
  test::expect_error([&] { ops::sum_repeats(y, 1, 5); }, {"sum_repeats", "not a multiple of 5"});
}

}  // namespace
}  // namespace primer
