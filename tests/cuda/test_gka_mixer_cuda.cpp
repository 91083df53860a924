// The Gated KalmaNet layer on the GPU in bf16 against the same layer in f64 on the CPU, run on the very values the
// GPU sees (tests/cuda/layer_parity.h): output, final states, the input gradient and every parameter gradient.
// At the default ridge 0.02 the readout and the key gradients use the part of x̂ (and of its adjoint) along the keys,
// which can be κ = 51 times smaller than the rest, so bf16 storage of x̂, q̃ and dq costs up to 2^-9·51 ≈ 0.1 of them;
// the precise mode (the default) keeps them in f32 and hi + lo, and Bf16LayerAtTheDefaultRidge and
// HybridLogitsAtTheDefaultRidge below hold it to issue 16's 5e-2 there. The first test runs at ridge 0.5 (κ = 3),
// where bf16 rounding is not amplified, so that its tolerances check the wiring (projections, gates, conv states,
// GQA, readout) at bf16 precision, at head_dim 64 and 128.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "core/autograd/functions.h"
#include "layers/decoder_lm.h"
#include "layers/gka_mixer.h"
#include "layers/hybrid_config.h"
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

// The layer at the default ridge 0.02 on anisotropic inputs, the hard case of issue 16, in every mode.
// The precise mode (the default) is held to the bound, 5e-2, on the output, the input gradient and every
// weight gradient: x̂ and q̃ (and their gradients) stay f32 between the ops, k and v from their β scaling on, and the
// kernels take them, the chunk states, the state gradients and the GLA's in-chunk dA as hi + lo operands, so what is
// left is the bf16 floor of the rest of the layer (projections, convolutions, norms: 2^-9 per rounding, a few in
// series). The gates' projections are the tight ones: in f64, a 2^-9 perturbation of x̂ or q̃, or of their gradients,
// moves a_proj's gradient by up to 4.9e-2 (every other site of the layer by at most 4.4e-3; docs/perf.md, "The gates'
// gradients"), so every product that forms them or dq̃ must be better than one bf16. Over 58 seeds on an H200
// (2026-11-29, with dA as a pair): y within 7.5e-3, dx 1.7e-2, every weight gradient 3.6e-2 (seed 16, 5.46e-2 on a_proj
// with one bf16 of dA, now 2.0e-2). The gates' per-head vectors (A_log, dt_bias, the β and α biases: two values each
// here, each a sum over every token of dots that cancel) are a statistic of a handful of draws, held within the whole
// gradient (test::expect_gradients_track). With fp16 iteration operands (`iterate_fp16: true`: X, P and K one fp16
// each, 2^-12) x̂ is ~1e-3 off where the pairs leave ~1e-5, which those gradients amplify: over the same seeds y within
// 2.6e-2 and dx 2.6e-2, held to 5e-2, but the gates' projections up to 7.8e-2 (seed 16: 7.2e-2), held to 1.5e-1
// (1e-1 on every gradient together): the speed option misses the bound there, and the precise mode is the
// default. The one-bf16 iterate (`precise_iterate: false`, bf16 vectors too) is held on y and dx only: its 2^-9
// operand rounding, amplified by up to κ = 51, put y 0.04–0.25 off over ~90 seeds (2026-11-29; dx up to 0.19), a tail
// too close to the 3e-1 it had for a test that must pass under any seed: 5e-1, which a wiring error (~1) still fails.
// The states do not pass through the solve: 5e-2.
TEST(GkaMixerCuda, Bf16LayerAtTheDefaultRidge) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Mode {
    bool precise, fp16;
    const char* name;
  };
  for (const Mode m : {Mode{true, false, "precise, bf16 hi + lo pairs (the default)"},
                       Mode{true, true, "precise, fp16 iteration operands (iterate_fp16: true)"},
                       Mode{false, false, "bf16 iterate"}}) {
    const bool precise = m.precise;
    ModelConfig c = test::one_layer_config(2, 2, 128);
    c.gka.precise_iterate = precise;
    c.gka.iterate_fp16 = m.fp16;
    const int64_t B = 1, T = 300;
    const Tensor x = anisotropic_hidden(B, T, c.hidden_size, seed + 1).to(DType::BF16);
    const Tensor dy = test::randn({B, T, c.hidden_size}, seed + 2).to(DType::BF16);
    std::printf("ridge 0.02, num_iter 30, %s\n", m.name);
    const test::LayerRun ref = run_layer(c, Device::cpu(), DType::F64, x, dy, seed);
    const test::LayerRun gpu = run_layer(c, Device::cuda(), DType::BF16, x, dy, seed);
    const double out_bound = precise ? 5e-2 : 5e-1;
    std::printf("  y %.2e, dx %.2e\n", test::compare(gpu.y, ref.y).rel_l2, test::compare(gpu.dx, ref.dx).rel_l2);
    test::expect_rel_l2(gpu.y, ref.y, out_bound, "y");
    test::expect_rel_l2(gpu.states[0], ref.states[0], 5e-2, "H state");
    test::expect_rel_l2(gpu.states[1], ref.states[1], 5e-2, "S state");
    test::expect_rel_l2(gpu.dx, ref.dx, out_bound, "dx");
    if (!precise) continue;
    const std::vector<std::string> names = test::parameter_names<layers::GkaMixer>(c, kPrefix);
    double worst_matrix = 0;  // printed beside the bounds: the modes' margins
    std::string worst_name;
    for (size_t i = 0; i < names.size(); ++i)
      if (ref.grads[i].numel() >= test::kFewElements) {
        const double e = test::compare(gpu.grads[i], ref.grads[i]).rel_l2;
        if (e > worst_matrix) worst_matrix = e, worst_name = names[i];
      }
    std::printf("  worst weight gradient %.2e (%s)\n", worst_matrix, worst_name.c_str());
    const double weight_bound = m.fp16 ? 1.5e-1 : 5e-2;
    test::expect_gradients_track(
        gpu.grads, ref.grads, names, [&](const std::string&) { return weight_bound; }, m.fp16 ? 1e-1 : 5e-2);
  }
}

// Issue 16's first sign of the problem: a small random GKA hybrid's logits in bf16 on the GPU against the same
// weights in f64 on the CPU, at the default ridge 0.02, were 16% off (32% with more mixers), where GDN and Mamba-2
// hybrids were 1.3%. The same here: a 4-layer Qwen3-shaped hybrid with two GKA layers, random weights and token ids,
// 2 × 300 tokens. The precise mode is held to the 5e-2 (bf16 activations through four blocks and the head);
// the one-bf16 mode is printed beside it.
TEST(GkaMixerCuda, HybridLogitsAtTheDefaultRidge) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ModelConfig c = test::one_layer_config(4, 2, 64);
  c.vocab_size = 256;
  c.num_hidden_layers = 4;
  c.qk_norm = true;
  c.layer_types = parse_hybrid_pattern("GKA-*-GKA-*", "test");
  c.validate("test");
  const Tensor ids = test::rand_ints({2, 300}, seed + 1, 0, c.vocab_size);
  struct Mode {
    bool precise, fp16;
    const char* name;
  };
  for (const Mode m : {Mode{true, false, "precise mode (the default)"}, Mode{true, true, "iterate_fp16: true"},
                       Mode{false, false, "precise_iterate: false"}}) {
    const bool precise = m.precise;
    c.gka.precise_iterate = precise;
    c.gka.iterate_fp16 = m.fp16;
    ParameterRegistry gpu_params, cpu_params;
    layers::DecoderLM gpu(c, gpu_params), cpu(c, cpu_params);
    gpu_params.materialize(Device::cuda(), DType::BF16, seed);
    cpu_params.materialize(Device::cpu(), DType::F64, seed);
    for (Parameter* p : cpu_params.all())
      p->var->value = gpu_params.get(p->name).var->value.to(Device::cpu()).to(DType::F64);
    const Tensor logits = gpu.logits(ids.to(Device::cuda())), ref = cpu.logits(ids);
    const test::Diff d = test::compare(logits, ref);
    std::printf("  %-28s logits rel L2 %.2e\n", m.name, d.rel_l2);
    EXPECT_EQ(d.nonfinite, 0);
    if (precise) {
      EXPECT_LE(d.rel_l2, 5e-2);
    }
  }
}

}  // namespace
}  // namespace primer
