// The Kalman linear attention layer on the GPU in bf16 against the same layer in f64 on the CPU, run on the very
// values the GPU sees (tests/cuda/layer_parity.h): output, the final (λ, η) (states 0 and 1), the input gradient and
// every parameter gradient, at head_dim 64 and 128 with GQA, the output gate and the short convolutions, over two
// ragged chunks of the backward's 64-token checkpoints.
#include <gtest/gtest.h>

#include "layers/kla_mixer.h"
#include "tests/cuda/layer_parity.h"

namespace primer {
namespace {

TEST(KlaMixerCuda, Bf16LayerTracksTheF64Cpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // bf16 activations (2^-9 ≈ 2e-3 relative each) through the projections, convolutions, norms and gate around an
  // f32 filter: 3e-2 on the output and the states (as the other bf16 layer tests); the gradients take the adjoint
  // path too, and the dynamics' gradients are sums over tokens, channels and the batch: 1e-1.
  test::expect_bf16_layer_tracks_f64<layers::KlaMixer>("model.layers.0.kla", seed, 3e-2, 1e-1);
}

}  // namespace
}  // namespace primer
