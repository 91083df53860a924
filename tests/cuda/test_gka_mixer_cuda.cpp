// The Gated KalmaNet layer on the GPU in bf16 against the same layer in f64 on the CPU, run on the very values the
// GPU sees (tests/cuda/layer_parity.h): output, final states, the input gradient and every parameter gradient.
// At the default ridge 0.02 the bf16 layer is intrinsically far from f64: the readout and the key gradients use
// the part of x̂ (and of its adjoint) along the keys, which can be κ = 51 times smaller than the rest, so bf16
// storage of x̂, q̃ and dq costs up to 2^-9·51 ≈ 0.1 of them (measured on an H100: output 5e-2, weight gradients
// ≤ 8e-2, bias gradients — sums over tokens of such dots — 0.2 to 0.27). test_chebyshev_solve_cuda.cpp bounds the
// solve at that ridge; here the layer runs at ridge 0.5 (κ = 3), where bf16 rounding is not amplified, so that the
// tolerances check the wiring (projections, gates, conv states, GQA, readout) at bf16 precision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "core/autograd/functions.h"
#include "layers/gka_mixer.h"
#include "tests/cuda/layer_parity.h"

namespace primer {
namespace {

constexpr const char* kPrefix = "model.layers.0.gka";

test::LayerRun run_layer(const ModelConfig& c, Device device, DType dtype, const Tensor& x, const Tensor& dy,
                         uint64_t seed) {
  return test::run_layer<layers::GkaMixer>(c, kPrefix, device, dtype, x, dy, seed);
}

TEST(GkaMixerCuda, Bf16LayerTracksTheF64Cpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t D : {64, 128}) {
    ModelConfig c = test::one_layer_config(4, 2, D);
    c.gka.ridge_strength = 0.5;
    const int64_t B = 2, T = 100;  // two chunks, the second ragged
    const Tensor x = test::randn({B, T, c.hidden_size}, seed + 1).to(DType::BF16);
    const Tensor dy = test::randn({B, T, c.hidden_size}, seed + 2).to(DType::BF16);
    std::printf("head_dim %ld\n", long(D));
    const test::LayerRun ref = run_layer(c, Device::cpu(), DType::F64, x, dy, seed);
    const test::LayerRun gpu = run_layer(c, Device::cuda(), DType::BF16, x, dy, seed);
    // bf16 activations (2^-9 ≈ 2e-3 relative each) through ~10 chained ops (projections, conv, norms, gates, the
    // solve with κ ≤ 3, the readout): 3e-2 on the output and states. Gradients take the adjoint path as well, and
    // the bias gradients are sums over tokens whose terms cancel: 1e-1. The decay's per-head parameters (A_log,
    // dt_bias: one value per head, two here) are each one such sum, cancelling further: seed 3407428007923691942
    // puts them 0.160 and 0.154 off f64 at head_dim 128 with the mma.sync and the wgmma iteration alike (equal to
    // three digits, so the kernels are not the cause), 0.004–0.041 over 12 other seeds. They are held to 5e-1,
    // which a wrong gradient (error ~1) fails; the f64 finite-difference checks of the layer (CPU) and the CUDA
    // tests of the decay op and of the solve's dgk bound them closely.
    test::expect_rel_l2(gpu.y, ref.y, 3e-2, "y");
    test::expect_rel_l2(gpu.states[0], ref.states[0], 3e-2, "H state");
    test::expect_rel_l2(gpu.states[1], ref.states[1], 3e-2, "S state");
    test::expect_rel_l2(gpu.dx, ref.dx, 1e-1, "dx");
    const std::vector<std::string> names = test::parameter_names<layers::GkaMixer>(c, kPrefix);
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      const bool per_head_decay = names[i].ends_with(".A_log") || names[i].ends_with(".dt_bias");
      test::expect_rel_l2(gpu.grads[i], ref.grads[i], per_head_decay ? 5e-1 : 1e-1, names[i]);
    }
  }
}

// Hidden states as a trained model's are: anisotropic, coordinates of a random mixing whose scales fall as
// (j + 1)^-0.75, so that the projected keys span a few directions strongly and the solve meets its condition number.
Tensor anisotropic_hidden(int64_t B, int64_t T, int64_t d, uint64_t seed) {
  const Tensor z = test::randn({B * T, d}, seed), mixing = test::randn({d, d}, seed + 1);
  const double* zp = z.data<double>();
  const double* m = mixing.data<double>();
  Tensor x = Tensor::zeros({B, T, d}, DType::F64);
  double* xp = x.data<double>();
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t j = 0; j < d; ++j) {
      const double scaled = std::pow(double(j + 1), -0.75) * zp[r * d + j];
      for (int64_t i = 0; i < d; ++i) xp[r * d + i] += m[j * d + i] * scaled;
    }
  return x;
}

// The layer at the default ridge 0.02 on anisotropic inputs, the hard case of issue 16, in both modes.
// The precise mode (the default) is held to the bound, 5e-2, on the output, the input gradient and every
// weight gradient: x̂ and q̃ (and their gradients) stay f32 between the ops, k and v from their β scaling on, and the
// kernels take them, the chunk states and the state gradients as hi + lo operands, so what is left is the bf16 floor
// of the rest of the layer (projections, convolutions, norms: 2^-9 per rounding, a few in series). On an H200 over
// 8 seeds: y within 7.3e-3, dx 1.7e-2, the weight matrices 3.1e-2 (k's path; 6–9e-3 elsewhere), every gradient
// together 1.7e-2. The gates' per-head vectors (A_log, dt_bias, the β and α biases: two values each here, each a sum
// over every token of dots that cancel) are a statistic of a handful of draws, held within the whole gradient
// (test::expect_gradients_track): up to 8.3e-2 (A_log, one seed of 8), most within 2e-2. With bf16 vectors the gate
// weights were 0.1–0.4 off (docs/perf.md, "GKA in bf16"). The one-bf16 iterate (`precise_iterate: false`, bf16
// vectors too) is held to 3e-1 on y and dx only: its 2^-9 operand rounding, amplified by up to κ = 51, reached 0.24.
// The states do not pass through the solve: 5e-2.
TEST(GkaMixerCuda, Bf16LayerAtTheDefaultRidge) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const bool precise : {true, false}) {
    ModelConfig c = test::one_layer_config(2, 2, 128);
    c.gka.precise_iterate = precise;
    const int64_t B = 1, T = 300;
    const Tensor x = anisotropic_hidden(B, T, c.hidden_size, seed + 1).to(DType::BF16);
    const Tensor dy = test::randn({B, T, c.hidden_size}, seed + 2).to(DType::BF16);
    std::printf("ridge 0.02, num_iter 30, %s\n", precise ? "precise (hi + lo iterate, f32 vectors)" : "bf16 iterate");
    const test::LayerRun ref = run_layer(c, Device::cpu(), DType::F64, x, dy, seed);
    const test::LayerRun gpu = run_layer(c, Device::cuda(), DType::BF16, x, dy, seed);
    const double out_bound = precise ? 5e-2 : 3e-1;
    test::expect_rel_l2(gpu.y, ref.y, out_bound, "y");
    test::expect_rel_l2(gpu.states[0], ref.states[0], 5e-2, "H state");
    test::expect_rel_l2(gpu.states[1], ref.states[1], 5e-2, "S state");
    test::expect_rel_l2(gpu.dx, ref.dx, out_bound, "dx");
    if (!precise) continue;
    const std::vector<std::string> names = test::parameter_names<layers::GkaMixer>(c, kPrefix);
    test::expect_gradients_track(
        gpu.grads, ref.grads, names, [](const std::string&) { return 5e-2; }, 5e-2);
  }
}

}  // namespace
}  // namespace primer
