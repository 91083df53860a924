// The Mamba-2 mixer in bf16 on the GPU against the same layer in f64 on the CPU with the same (bf16-rounded)
// weights, input and initial states: output, final states, and the gradients of the input, every parameter and
// both initial states, with gradients flowing into the final states.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/autograd/functions.h"
#include "layers/mamba2_mixer.h"
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector<double>()) m = std::max(m, std::abs(x));
  return m;
}

void expect_match(const Tensor& gpu, const Tensor& ref, double rel, double elem, const std::string& what) {
  const test::Diff d = test::compare(gpu.to(Device::cpu()), ref);
  std::printf("  %-40s rel L2 %.2e   max abs / max |ref| %.2e\n", what.c_str(), d.rel_l2,
              d.max_abs / std::max(max_abs(ref), 1e-30));
  test::expect_close(gpu.to(Device::cpu()), ref, rel, elem * max_abs(ref) + 1e-6, what);
}

struct LayerRun {
  ag::Var x, conv0, ssm0, y;
  layers::MixerState out;
};

TEST(Mamba2Cuda, Bf16LayerMatchesTheF64Layer) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 16, c.hidden_size = 128, c.intermediate_size = 256, c.num_hidden_layers = 1;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 64, c.max_position_embeddings = 512;
  const std::string prefix = "model.layers.0.mamba";
  ParameterRegistry gpu_params, cpu_params;
  layers::Mamba2Mixer gpu_mixer(c, prefix, gpu_params), cpu_mixer(c, prefix, cpu_params);
  gpu_params.materialize(Device::cuda(), DType::BF16, seed);
  cpu_params.materialize(Device::cpu(), DType::F64, seed);
  for (Parameter* p : cpu_params.all()) p->var->value = test::cpu_f64(gpu_params.get(p->name).var->value);

  constexpr int64_t B = 2, T = 100;  // two chunks, the second partial
  const int64_t conv_channels = 256 + 2 * 128;
  const Tensor x = test::random_on_cuda({B, T, 128}, seed + 1, DType::BF16);
  const Tensor conv0 = test::random_on_cuda({B, conv_channels, 3}, seed + 2, DType::BF16);
  const Tensor ssm0 = test::random_on_cuda({B, 4, 64, 64}, seed + 3, DType::F32, 0.1);
  const Tensor dy = test::random_on_cuda({B, T, 128}, seed + 4, DType::BF16);
  const Tensor dconv = test::random_on_cuda({B, conv_channels, 3}, seed + 5, DType::BF16);
  const Tensor dssm = test::random_on_cuda({B, 4, 64, 64}, seed + 6, DType::F32);
  layers::MixerContext ctx;  // no RoPE (use_pos_emb off)

  auto run = [&](layers::Mamba2Mixer& mixer, bool cpu) {
    auto on = [&](const Tensor& t) { return cpu ? test::cpu_f64(t) : t; };
    LayerRun r;
    r.x = ag::leaf(on(x));
    r.conv0 = ag::leaf(on(conv0));
    r.ssm0 = ag::leaf(on(ssm0));
    layers::MixerState in{{r.conv0}, {r.ssm0}};
    r.y = mixer.forward(r.x, ctx, &in, &r.out);
    r.y->grad = on(dy);
    r.out.conv[0]->grad = on(dconv);
    r.out.recurrent[0]->grad = on(dssm);
    ag::current_tape().backward();
    return r;
  };
  const LayerRun g = run(gpu_mixer, false);
  const LayerRun r = run(cpu_mixer, true);
  // A chain of about ten bf16-rounded activations (projections, normed B and C, the conv output, v = Δ·x, the GLA
  // output and its bf16 operands, the gated and normed output) each adds an independent 2^-9 relative error, which
  // the norms and products pass on at about unit gain: ~1e-2 relative L2 expected (measured ≤ 6.6e-3, and 1.1e-2
  // for D's gradient, a sum of bf16 products D·x over every token). 3e-2, and each element within 5e-2 of the
  // largest reference magnitude.
  constexpr double kRel = 3e-2, kElem = 5e-2;
  expect_match(g.y->value, r.y->value, kRel, kElem, "y");
  expect_match(g.out.conv[0]->value, r.out.conv[0]->value, kRel, kElem, "conv state out");
  expect_match(g.out.recurrent[0]->value, r.out.recurrent[0]->value, kRel, kElem, "ssm state out");
  expect_match(g.x->grad, r.x->grad, kRel, kElem, "dx");
  expect_match(g.conv0->grad, r.conv0->grad, kRel, kElem, "d conv state in");
  expect_match(g.ssm0->grad, r.ssm0->grad, kRel, kElem, "d ssm state in");
  for (Parameter* p : cpu_params.all())
    expect_match(gpu_params.get(p->name).var->grad, p->var->grad, kRel, kElem, p->name);
}

}  // namespace
}  // namespace primer
