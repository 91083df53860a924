// Programmatic Dependent Launch (core/ops/cuda/dependent_launch.cuh): every primer kernel starts while the kernel
// before it on the stream finishes, and waits on the SMs for it. A kernel that read or wrote global memory before that
// wait would see its predecessor's buffers half written. Here a chain of dependent kernels, large (many waves) and
// small, walks integer values whose every step changes them, so a read run ahead of its producer (of a buffer the
// allocator handed back from the round before) would show as a wrong value; the values stay exact in f32 and bf16.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/tensor.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

#ifdef PRIMER_WITH_CUDA
TEST(DependentLaunchCuda, EachKernelSeesAllOfTheKernelBeforeIt) {
  PRIMER_REQUIRE_CUDA();
  EXPECT_TRUE(cuda::dependent_launch_enabled()) << "on by default (PRIMER_NO_DEPENDENT_LAUNCH unset)";
  const int64_t rows = 4096, cols = 4096;  // 64 MB of f32: the elementwise kernels run many waves
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor start = test::rand_ints({rows, cols}, seed, -8, 9, DType::F32);
  std::vector<int64_t> host = start.to_vector<int64_t>();
  Tensor a = start.to(Device::cuda());
  const int rounds = 12;
  for (int r = 1; r <= rounds; ++r) {
    // a ← (2a − a) + r, through a bf16 round trip (integers up to 256 are exact), then its row sums.
    const Tensor twice = ops::add(a, a);                                                 // a dense map
    const Tensor back = ops::sub(twice, a);                                              // another
    const Tensor step = Tensor::full({1, cols}, double(r), DType::F32, Device::cuda());  // a fill
    a = ops::add(back, step).to(DType::BF16).to(DType::F32);                             // broadcast, casts
    const std::vector<float> sums = ops::sum(ops::scale(a, 0.5), 1).to(Device::cpu()).to_vector<float>();  // rows
    for (int64_t& v : host) v += r;
    for (int64_t i = 0; i < rows; ++i) {
      int64_t want = 0;
      for (int64_t j = 0; j < cols; ++j) want += host[size_t(i * cols + j)];
      ASSERT_EQ(double(sums[size_t(i)]), 0.5 * double(want)) << "round " << r << ", row " << i;
    }
  }
  const std::vector<float> last = a.to(Device::cpu()).to_vector<float>();
  for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(double(last[i]), double(host[i])) << "element " << i;
}
#endif

}  // namespace
}  // namespace primer
