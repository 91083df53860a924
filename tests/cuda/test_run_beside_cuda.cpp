// cuda::run_beside: `beside` runs on a second stream and `main` on the compute stream, both after what was issued
// before, and whatever is issued after waits for both (the gated delta rules' backward runs its recompute pass beside
// its reverse pass this way).
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/tensor.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

#ifdef PRIMER_WITH_CUDA
// Each side copies a large buffer along a chain of device copies (tens of microseconds each); the host then reads
// both chains' ends through the compute stream. Without the fork, a chain would copy the source before its upload
// landed; without the join, the read would run ahead of the second stream's copies.
TEST(RunBesideCuda, BothSidesStartAfterEarlierWorkAndLaterWorkWaitsForBoth) {
  PRIMER_REQUIRE_CUDA();
  const int64_t n = int64_t(1) << 24;  // 64 MB of f32
  const int links = 8;
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int round = 0; round < 3; ++round) {
    const Tensor host = test::randn({n}, seed + round, DType::F32);
    std::vector<Tensor> main_chain, side_chain;
    for (int i = 0; i <= links; ++i) {
      main_chain.push_back(Tensor::empty({n}, DType::F32, Device::cuda()));
      side_chain.push_back(Tensor::empty({n}, DType::F32, Device::cuda()));
      test::poison(main_chain.back());
      test::poison(side_chain.back());
    }
    // The side chain's source is filled by a device copy on the compute stream (an upload waits for itself): only the
    // fork orders it before that chain.
    cuda::copy(main_chain[0].data_ptr(), host.data_ptr(), size_t(n) * 4, cuda::CopyKind::HostToDevice);
    cuda::copy(side_chain[0].data_ptr(), main_chain[0].data_ptr(), size_t(n) * 4, cuda::CopyKind::DeviceToDevice);
    auto chain = [&](std::vector<Tensor>& c) {
      for (int i = 0; i < links; ++i)
        cuda::copy(c[i + 1].data_ptr(), c[i].data_ptr(), size_t(n) * 4, cuda::CopyKind::DeviceToDevice);
    };
    cudaStream_t seen_main = nullptr, seen_beside = nullptr;
    cuda::run_beside(
        [&] {
          seen_main = cuda::stream();
          chain(main_chain);
        },
        [&] {
          seen_beside = cuda::stream();
          chain(side_chain);
        });
    EXPECT_EQ(seen_main, cuda::stream()) << "main runs on the compute stream";
    EXPECT_NE(seen_beside, cuda::stream()) << "beside runs on another stream";
    const std::vector<float> want = host.to_vector<float>();
    EXPECT_EQ(main_chain[links].to(Device::cpu()).to_vector<float>(), want) << "round " << round;
    EXPECT_EQ(side_chain[links].to(Device::cpu()).to_vector<float>(), want) << "round " << round;
  }
}

TEST(RunBesideCuda, RestoresTheComputeStreamAndRefusesToNest) {
  PRIMER_REQUIRE_CUDA();
  const cudaStream_t compute = cuda::stream();
  EXPECT_THROW(cuda::run_beside([] {}, [] { throw std::runtime_error("beside failed"); }), std::runtime_error);
  EXPECT_EQ(cuda::stream(), compute);
  test::expect_error([] { cuda::run_beside([] {}, [] { cuda::run_beside([] {}, [] {}); }); }, {"do not nest"});
  EXPECT_EQ(cuda::stream(), compute);
  cuda::synchronize();
}
#endif

}  // namespace
}  // namespace primer
