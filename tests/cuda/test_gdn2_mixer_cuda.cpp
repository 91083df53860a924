// The Gated DeltaNet-2 layer on the GPU in bf16 against the same layer in f64 on the CPU, run on the very values the
// GPU sees (tests/cuda/layer_parity.h): output, the final recurrent state, the input gradient and every parameter
// gradient, at head_dim 64 and 128 with GQA, the output gate and the short convolutions, over T = 100 (ragged blocks
// of the backward's 32-token checkpoints).
#include <gtest/gtest.h>

#include <cstdio>

#include "layers/gdn2_mixer.h"
#include "tests/cuda/layer_parity.h"

namespace primer {
namespace {

constexpr const char* kPrefix = "model.layers.0.gdn2";

TEST(Gdn2MixerCuda, Bf16LayerTracksTheF64Cpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t D : {64, 128}) {
    const ModelConfig c = test::one_layer_config(4, 2, D);
    const int64_t B = 2, T = 100;
    const Tensor x = test::randn({B, T, c.hidden_size}, seed + 1).to(DType::BF16);
    const Tensor dy = test::randn({B, T, c.hidden_size}, seed + 2).to(DType::BF16);
    std::printf("head_dim %ld\n", long(D));
    const test::LayerRun ref = test::run_layer<layers::Gdn2Mixer>(c, kPrefix, Device::cpu(), DType::F64, x, dy, seed);
    const test::LayerRun gpu = test::run_layer<layers::Gdn2Mixer>(c, kPrefix, Device::cuda(), DType::BF16, x, dy, seed);
    // bf16 activations (2^-9 ≈ 2e-3 relative each) through the projections, convolutions, norms and gates around an
    // f32 core: 3e-2 on the output and the state (as the other bf16 layer tests); the gradients take the adjoint path
    // too and the decay's and gates' parameters sum over tokens and the batch: 1e-1.
    test::expect_rel_l2(gpu.y, ref.y, 3e-2, "y");
    for (size_t i = 0; i < ref.states.size(); ++i)
      test::expect_rel_l2(gpu.states[i], ref.states[i], 3e-2, "state " + std::to_string(i));
    test::expect_rel_l2(gpu.dx, ref.dx, 1e-1, "dx");
    const std::vector<std::string> names = test::parameter_names<layers::Gdn2Mixer>(c, kPrefix);
    for (size_t i = 0; i < ref.grads.size(); ++i) test::expect_rel_l2(gpu.grads[i], ref.grads[i], 1e-1, names[i]);
  }
}

}  // namespace
}  // namespace primer
