// CUDA parity of Tensor copies: strided copy with conversion between every dtype pair, contiguous() and casts of
// transposed/sliced/permuted views, and host<->device round trips, all into poisoned destinations. The reference is
// the CPU copy of the same view of the same bytes; conversions are exact functions of the source value on both
// devices (via double, round-to-nearest-even for 16-bit floats, truncation for integers), so results must be equal.
#include <gtest/gtest.h>

#include <functional>

#include "core/ops/cast.h"
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

}  // namespace
}  // namespace primer
