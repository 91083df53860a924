#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

TEST(Tensor, ViewsShareStorageAndIndexCorrectly) {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = float(i) + 0.5f;
  Tensor t = Tensor::from_vector(v, {2, 3, 4}, DType::F32);
  Tensor tr = t.transpose(0, 2);  // [4, 3, 2]
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(tr.storage(), t.storage());
  const auto c = tr.contiguous().to_vector<float>();
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 3; ++b)
      for (int d = 0; d < 2; ++d) EXPECT_EQ(c[(a * 3 + b) * 2 + d], v[(d * 3 + b) * 4 + a]);
  Tensor s = t.slice(1, 1, 3).select(2, 2);  // [2, 2] = t[:, 1:3, 2]
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{v[6], v[10], v[18], v[22]}));
  EXPECT_EQ(t.view({-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_THROW(tr.view({24}), Error);
}

TEST(Tensor, CastsRoundTripWithinDtypePrecision) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Tensor x = test::randn({1000}, seed, DType::F32);
  for (DType dt : {DType::BF16, DType::F16, DType::F64}) {
    Tensor back = x.to(dt).to(DType::F32);
    const double unit = dt == DType::BF16 ? 1.0 / 256 : dt == DType::F16 ? 1.0 / 2048 : 1e-7;  // half-ulp bound
    const auto a = back.to_vector<float>(), b = x.to_vector<float>();
    // f16 subnormals (|x| < 2^-14) have an absolute spacing of 2^-24: half of it bounds their rounding error.
    const double floor = dt == DType::F16 ? std::ldexp(1.0, -25) : 0.0;
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_LE(std::abs(a[i] - b[i]), unit * std::abs(b[i]) + floor) << dtype_name(dt);
  }
  // Round to nearest even at the bf16 halfway point: 1 + 2^-8 lies exactly between 1 and 1 + 2^-7.
  EXPECT_EQ(float(bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(float(bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_EQ(float(f16(65504.0f)), 65504.0f);
  EXPECT_EQ(float(f16(1e-7f)), 2 * f16::to_float(1));  // 1e-7 = 1.68 x the smallest subnormal: rounds to 2x
}

TEST(Tensor, MemoryStatsTrackCurrentAndPeak) {
  const MemoryStats before = memory_stats(Device::cpu());
  {
    Tensor a = Tensor::empty({1 << 20}, DType::F32);
    EXPECT_GE(memory_stats(Device::cpu()).current, before.current + (4u << 20));
  }
  EXPECT_EQ(memory_stats(Device::cpu()).current, before.current);
  EXPECT_GE(memory_stats(Device::cpu()).peak, before.current + (4u << 20));
}

TEST(Rng, DependsOnlyOnKeyAndIndex) {
  const uint64_t k = key_for(1234, "model.layers.0.mlp.up_proj.weight");
  Tensor whole = Tensor::empty({64, 32}, DType::F64);
  fill_normal(whole, k, 0.0, 1.0);
  const auto w = whole.to_vector<double>();
  // Element i never depends on how many elements are drawn or in which order.
  for (int i : {0, 1, 777, 2047}) EXPECT_EQ(w[i], normal01(k, i));
  EXPECT_NE(key_for(1234, "a"), key_for(1234, "b"));
  EXPECT_NE(key_for(1, "a"), key_for(2, "a"));
  double mean = 0, var = 0;
  for (double v : w) mean += v;
  mean /= w.size();
  for (double v : w) var += (v - mean) * (v - mean);
  var /= w.size();
  EXPECT_NEAR(mean, 0.0, 0.1);  // 2048 samples: std of the mean is 0.022
  EXPECT_NEAR(var, 1.0, 0.12);
}

TEST(Errors, NameTheTensorAndTheExpectation) {
  Tensor t = Tensor::zeros({2, 3}, DType::F32);
  try {
    (void)t.data<double>();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32[2, 3] (cpu)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor_inl.h:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace primer
