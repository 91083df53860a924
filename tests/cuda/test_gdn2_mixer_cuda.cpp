// The Gated DeltaNet-2 layer on the GPU in bf16 against the same layer in f64 on the CPU, run on the very values the
// GPU sees (tests/cuda/layer_parity.h): output, the final recurrent state, the input gradient and every parameter
// gradient, at head_dim 64 and 128 with GQA, the output gate and the short convolutions, over T = 100 (a chunk of 64
// and a ragged one of the chunked kernels, which bf16 layers at these head dims run), with GDN-2's gates and with
// KDA's.
#include <gtest/gtest.h>

#include "layers/gdn2_mixer.h"
#include "tests/cuda/layer_parity.h"

namespace primer {
namespace {

TEST(Gdn2MixerCuda, Bf16LayerTracksTheF64Cpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // bf16 activations (2^-9 ≈ 2e-3 relative each) through the projections, convolutions, norms and gates around a
  // core of bf16 products: 3e-2 on the output and the state (as the other bf16 layer tests, GDN's among them); the
  // gradients take the adjoint path too and the decay's and gates' parameters sum over tokens and the batch: 1e-1.
  test::expect_bf16_layer_tracks_f64<layers::Gdn2Mixer>("model.layers.0.gdn2", seed, 3e-2, 1e-1);
}

TEST(Gdn2MixerCuda, KdaGatesBf16LayerTracksTheF64Cpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // The same bounds: KDA's one gate per head reaches the same kernels repeated over the channels.
  test::expect_bf16_layer_tracks_f64<layers::Gdn2Mixer>("model.layers.0.gdn2", seed, 3e-2, 1e-1, [](ModelConfig& c) {
    c.gdn2.kda_gates = true;
    c.gdn2.allow_neg_eigval = true;
  });
}

}  // namespace
}  // namespace primer
