// CUDA parity of Tensor copies: strided copy with conversion between every dtype pair, contiguous() and casts of
// transposed/sliced/permuted views, and host<->device round trips, all into poisoned destinations. The reference is
// the CPU copy of the same view of the same bytes; conversions are exact functions of the source value on both
// devices (via double, round-to-nearest-even for 16-bit floats, truncation for integers), so results must be equal.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "core/ops/cast.h"
#ifdef PRIMER_WITH_CUDA
#include "core/ops/cuda/copy.h"
#endif
#include "core/ops/elementwise.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

const DType kAll[] = {DType::F32, DType::BF16, DType::F16, DType::F64, DType::I32, DType::I64, DType::U8};

// Values in [1, 150): exact or well-defined in every dtype (u8 included), and never equal to an integer poison
// sentinel after truncation, so an unwritten element always shows.
Tensor base_values(const Shape& shape, uint64_t seed, DType dt) {
  return test::rand_uniform(shape, seed, 1.0, 150.0, DType::F64).to(dt);
}

struct View {
  const char* name;
  std::function<Tensor(const Tensor&)> make;
};
const View kViews[] = {
    {"transpose", [](const Tensor& t) { return t.transpose(0, 2); }},
    {"slice", [](const Tensor& t) { return t.slice(1, 1, 5); }},
    {"permute",
     [](const Tensor& t) {
       return t.permute({1, 2, 0});
     }},
    {"slice+transpose", [](const Tensor& t) { return t.slice(2, 1, 6).transpose(0, 1); }},
    {"select", [](const Tensor& t) { return t.select(1, 3); }},
};

void expect_equal(const Tensor& actual, const Tensor& expected, const std::string& what) {
  const test::Diff d = test::compare(actual, expected);
  EXPECT_EQ(d.nonfinite, 0) << what << ": unwritten or non-finite elements";
  EXPECT_EQ(d.max_abs, 0.0) << what;
}

TEST(CopyCuda, StridedCopyConvertsEveryDtypePair) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType src_dt : kAll) {
    const Tensor host = base_values({5, 6, 7}, seed, src_dt);
    const Tensor dev = host.to(Device::cuda());  // dense bytes: a plain memcpy
    for (const View& v : kViews) {
      const Tensor hv = v.make(host), dv = v.make(dev);
      for (DType dst_dt : kAll) {
        const std::string what = fmt::format("{} -> {} of {}", dtype_name(src_dt), dtype_name(dst_dt), v.name);
        Tensor expected = Tensor::empty(hv.shape(), dst_dt);
        expected.copy_from(hv);
        Tensor out = Tensor::empty(dv.shape(), dst_dt, Device::cuda());
        test::poison(out);
        out.copy_from(dv);
        expect_equal(out.to(Device::cpu()), expected, "copy " + what);
        expect_equal(dv.to(dst_dt).to(Device::cpu()), expected, "cast " + what);
      }
      expect_equal(dv.contiguous().to(Device::cpu()), hv.contiguous(),
                   fmt::format("contiguous {} {}", dtype_name(src_dt), v.name));
    }
  }
}

TEST(CopyCuda, IntoStridedDestinations) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType dt : {DType::F32, DType::BF16, DType::I64}) {
    const Tensor src = base_values({67, 129, 3}, seed, DType::F32).to(Device::cuda());
    // Write a dense source through a permuted view of a poisoned buffer; read back the buffer.
    Tensor buffer = Tensor::empty({3, 67, 129}, dt, Device::cuda());
    test::poison(buffer);
    buffer.permute({1, 2, 0}).copy_from(src);
    Tensor expected = Tensor::empty({3, 67, 129}, dt);
    expected.permute({1, 2, 0}).copy_from(src.to(Device::cpu()));
    expect_equal(buffer.to(Device::cpu()), expected, fmt::format("permuted destination {}", dtype_name(dt)));
  }
}

// Views whose rows along the last dim are contiguous and 16-byte aligned go through the packed kernel (a slice of a
// projection's output, a [B, T, H, D] <-> [B, H, T, D] transpose); a slice that starts off a pack does not.
TEST(CopyCuda, PackedRowsMatchTheElementwiseCopy) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const View views[] = {
      {"last-dim slice", [](const Tensor& t) { return t.slice(2, 8, 40); }},
      {"head transpose", [](const Tensor& t) { return t.transpose(0, 1); }},
      {"permuted slice",
       [](const Tensor& t) {
         return t.permute({1, 0, 2}).slice(2, 16, 48);
       }},
      {"slice off a pack", [](const Tensor& t) { return t.slice(2, 3, 35); }},
  };
  const DType dtypes[] = {DType::F32, DType::BF16, DType::F16, DType::F64, DType::U8};
  for (DType src_dt : dtypes) {
    const Tensor host = base_values({6, 5, 48}, seed, src_dt);
    const Tensor dev = host.to(Device::cuda());
    for (const View& v : views) {
      for (DType dst_dt : dtypes) {
        const Tensor hv = v.make(host), dv = v.make(dev);
        Tensor expected = Tensor::empty(hv.shape(), dst_dt);
        expected.copy_from(hv);
        Tensor out = Tensor::empty(dv.shape(), dst_dt, Device::cuda());
        test::poison(out);
        out.copy_from(dv);
        expect_equal(out.to(Device::cpu()), expected,
                     fmt::format("{} -> {} of {}", dtype_name(src_dt), dtype_name(dst_dt), v.name));
        // and into the same view of a poisoned buffer (a strided, packed destination)
        Tensor buffer = Tensor::empty(dev.shape(), dst_dt, Device::cuda());
        test::poison(buffer);
        v.make(buffer).copy_from(dv);
        expect_equal(v.make(buffer.to(Device::cpu())), expected,
                     fmt::format("{} -> {} into {}", dtype_name(src_dt), dtype_name(dst_dt), v.name));
      }
    }
  }
}

// Dense casts among f32, bf16 and f16 take a flat kernel (packs of a 16-byte store, the rest one by one; a view that
// starts off 16 bytes the strided one): every pair, lengths that leave every tail from 0 to 7, unrounded normal
// values over a wide range, and the hi + lo split of f32 values (hi = bf16(x), lo = bf16(x − hi)) on the same paths.
TEST(CopyCuda, DenseCastsAndSplitsMatchTheCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const DType floats[] = {DType::F32, DType::BF16, DType::F16};
  for (const int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(4099), int64_t(1 << 20) + 5}) {
    // x·2^e with e in [-20, 12): within f16's range (a non-finite element would read as unwritten), down into its
    // subnormals below 2^-14.
    Tensor values = test::randn({n}, seed + uint64_t(n), DType::F64);
    const Tensor expo = test::rand_ints({n}, seed + uint64_t(n) + 1, -20, 12, DType::I64);
    for (int64_t i = 0; i < n; ++i)
      values.data<double>()[i] = std::ldexp(values.data<double>()[i], int(expo.data<int64_t>()[i]));
    for (DType src_dt : floats) {
      const Tensor host = values.to(src_dt);
      const Tensor dev = host.to(Device::cuda());
      for (const int64_t start : {int64_t(0), int64_t(1)}) {  // a view one element in: off 16 bytes
        if (start >= n) continue;
        const Tensor hv = host.slice(0, start, n), dv = dev.slice(0, start, n);
        for (DType dst_dt : floats) {
          if (dst_dt == src_dt) continue;
          const std::string what =
              fmt::format("{} -> {}, n {}, from {}", dtype_name(src_dt), dtype_name(dst_dt), n - start, start);
          Tensor out = Tensor::empty(dv.shape(), dst_dt, Device::cuda());
          test::poison(out);
          out.copy_from(dv);
          expect_equal(out.to(Device::cpu()), hv.to(dst_dt), what);
        }
#ifdef PRIMER_WITH_CUDA  // (the launcher exists only in CUDA builds; the test skips without a GPU anyway)
        if (src_dt != DType::F32) continue;
        Tensor hi = Tensor::empty(dv.shape(), DType::BF16, Device::cuda()), lo = hi.clone();
        test::poison(hi);
        test::poison(lo);
        const Tensor x = dv.contiguous();
        ops::cuda_ops::split_bf16(x.data<float>(), hi.data_ptr(), lo.data_ptr(), x.numel());
        const Tensor expected_hi = hv.to(DType::BF16);
        expect_equal(hi.to(Device::cpu()), expected_hi, fmt::format("split hi, n {}, from {}", n - start, start));
        expect_equal(lo.to(Device::cpu()), ops::sub(hv, expected_hi.to(DType::F32)).to(DType::BF16),
                     fmt::format("split lo, n {}, from {}", n - start, start));
#endif
      }
    }
  }
}

TEST(CopyCuda, HostDeviceRoundTrips) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType dt : kAll) {
    const Tensor host = base_values({37, 1025}, seed, dt);
    expect_equal(host.to(Device::cuda()).to(Device::cpu()), host, fmt::format("round trip {}", dtype_name(dt)));
    // Host view -> device with a dtype change (staged copy), and device -> poisoned strided host view.
    const Tensor hv = host.transpose(0, 1).slice(0, 3, 1000);
    Tensor dev = Tensor::empty(hv.shape(), DType::F32, Device::cuda());
    test::poison(dev);
    dev.copy_from(hv);
    expect_equal(dev.to(Device::cpu()), hv.to(DType::F32),
                 fmt::format("host view -> device f32 from {}", dtype_name(dt)));
    Tensor back = Tensor::empty({hv.size(1), hv.size(0)}, dt);
    test::poison(back);
    back.transpose(0, 1).copy_from(dev);
    expect_equal(back.transpose(0, 1), hv.to(DType::F32), fmt::format("device -> host view {}", dtype_name(dt)));
  }
}

// zero_() and same-dtype copies of contiguous views at byte offsets and lengths (shorter and longer than a 16-byte
// store; copies between views equally and unequally far from 16-byte alignment): every byte of the view written,
// every byte around it as it was.
TEST(CopyCuda, ZerosAndDenseCopiesWriteEveryByteOfTheViewAndNoOther) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t n = 5000;
  const Tensor host = base_values({n}, seed, DType::U8);
  const std::vector<int64_t> values = host.to_vector<int64_t>();
  const Tensor source = host.to(Device::cuda());
  for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
           {0, n}, {1, n - 3}, {7, 8}, {15, 33}, {16, 4096}, {3, 18}, {17, 17 + 1601}, {4000, 4005}}) {
    const Tensor dev = host.to(Device::cuda());
    dev.slice(0, begin, end).zero_();
    const std::vector<int64_t> got = dev.to_vector<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[size_t(i)], begin <= i && i < end ? 0 : values[size_t(i)])
          << "byte " << i << " after zeroing [" << begin << ", " << end << ")";
    for (const int64_t shift : {int64_t(0), int64_t(16), int64_t(5)}) {  // src at dst's alignment, or not
      if (end + shift > n) continue;
      const Tensor copied = Tensor::zeros({n}, DType::U8, Device::cuda());
      copied.slice(0, begin, end).copy_from(source.slice(0, begin + shift, end + shift));
      const std::vector<int64_t> c = copied.to_vector<int64_t>();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(c[size_t(i)], begin <= i && i < end ? values[size_t(i + shift)] : 0)
            << "byte " << i << " after copying [" << begin + shift << ", " << end + shift << ") to [" << begin << ", "
            << end << ")";
    }
  }
  // Wider dtypes through the same bytes: an f32 view at a 4-byte offset, a bf16 one at a 2-byte offset.
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    const Tensor dev = base_values({3, 999}, seed + 1, dt).to(Device::cuda());
    dev.select(0, 1).slice(0, 1, 998).zero_();
    const Tensor want = base_values({3, 999}, seed + 1, dt);
    want.select(0, 1).slice(0, 1, 998).fill_(0.0);
    expect_equal(dev.to(Device::cpu()), want, fmt::format("zero_ of a row of {}", dtype_name(dt)));
  }
}

}  // namespace
}  // namespace primer
