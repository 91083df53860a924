// AdamW on CUDA (the batched launches of optim/adamw_kernels.cu) against the CPU loop on the same numbers: many
// parameters (several launches' worth), sizes around the 16,384-element chunk and below a float4, views at odd
// offsets (no 16-byte alignment: the scalar path), decay on and off, clipping active; the global gradient norm
// against an f64 sum.
//
// Tolerances: each element runs the same f32 formula on both sides, but nvcc fuses multiplies and adds that the host
// compiler does not (one rounding fewer), and the clipping coefficient comes from a norm summed in another order. The
// results then agree to a few ulps of each line's *terms*, not of its result, which may cancel (m = β1·m + (1−β1)·g
// near zero): 1e-6 (about 16 f32 ulps) of |β1·m| + |(1−β1)·g|, of β2·v + (1−β2)·g², and of |p| + lr·(|update| +
// wd·|p|) with the update's own bound carried through. The bf16 compute copy must be the GPU's master rounded once.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/parameters.h"
#include "optim/adamw.h"
#include "optim/adamw_kernels.h"
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

// One tensor's values before a step and the CPU loop's values after it.
struct Before {
  std::vector<float> master, m, v, g;
};
struct After {
  std::vector<float> master, m, v;
};

void expect_step_matches(const After& got, const After& want, const Before& in, const optim::AdamWStep& s, float wd,
                         const std::string& what) {
  ASSERT_EQ(got.master.size(), want.master.size()) << what;
  for (size_t i = 0; i < want.master.size(); ++i) {
    const double g = std::abs(in.g[i]);
    const double m_terms = s.beta1 * std::abs(in.m[i]) + (1 - s.beta1) * g;
    const double v_terms = s.beta2 * in.v[i] + (1 - s.beta2) * g * g;
    const double denominator = std::sqrt(want.v[i] / s.bias_correction2) + s.eps;
    const double update_terms = m_terms / s.bias_correction1 / denominator;
    const double p_terms = std::abs(in.master[i]) + s.lr * (update_terms + wd * std::abs(in.master[i]));
    ASSERT_NEAR(got.m[i], want.m[i], 1e-6 * m_terms) << what << " m[" << i << "]";
    ASSERT_NEAR(got.v[i], want.v[i], 1e-6 * v_terms) << what << " v[" << i << "]";
    ASSERT_NEAR(got.master[i], want.master[i], 1e-6 * p_terms) << what << " master[" << i << "]";
  }
}

// Sizes: single elements, tails of 1-3 after float4s, one chunk and a bit, several chunks.
const std::vector<int64_t> kSizes = {1, 3, 5, 8, 127, 16383, 16384, 16385, 40001, 70000};

TEST(AdamWCuda, RegistryStepsMatchTheCpu) {  // three steps, each from the same state on both sides
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ParameterRegistry gpu, cpu;
  for (ParameterRegistry* r : {&gpu, &cpu})
    for (size_t i = 0; i < 90; ++i)  // 90 parameters: three launches of the batched kernels
      r->add("p" + std::to_string(i), {kSizes[i % kSizes.size()]}, InitRule::normal(0.5), i % 3 != 0);
  gpu.materialize(Device::cuda(), DType::BF16, seed);
  cpu.materialize(Device::cpu(), DType::F32, seed);
  optim::AdamWConfig cfg;
  cfg.max_grad_norm = 2.0;  // below the gradients' norm (~400): clipping on
  optim::AdamW on_gpu(gpu, cfg), on_cpu(cpu, cfg);
  for (int step = 1; step <= 3; ++step) {
    double sumsq = 0;
    std::vector<Before> before;
    for (size_t i = 0; i < cpu.all().size(); ++i) {
      Parameter *c = cpu.all()[i], *g = gpu.all()[i];
      c->var->grad = test::randn(c->shape, seed + 1000 * uint64_t(step) + i, DType::F32);
      g->var->grad = c->var->grad.to(Device::cuda());
      for (double x : c->var->grad.to_vector<double>()) sumsq += x * x;
      // Each step starts the GPU from the CPU's state, so that each comparison measures one step's differences.
      const bool fresh = !on_cpu.has_state(c->name);
      g->master.copy_from(c->master.to(Device::cuda()));
      if (!fresh)
        on_gpu.set_state(g->name, on_cpu.first_moment(c->name).to(Device::cuda()),
                         on_cpu.second_moment(c->name).to(Device::cuda()));
      const std::vector<float> zeros(size_t(c->master.numel()), 0.f);
      before.push_back({host(c->master), fresh ? zeros : host(on_cpu.first_moment(c->name)),
                        fresh ? zeros : host(on_cpu.second_moment(c->name)), host(c->var->grad)});
    }
    on_gpu.step(1e-2);
    on_cpu.step(1e-2);
    EXPECT_NEAR(on_gpu.grad_norm(), std::sqrt(sumsq), 1e-6 * std::sqrt(sumsq)) << "step " << step;
    const optim::AdamWStep s{1e-2f,
                             float(cfg.beta1),
                             float(cfg.beta2),
                             float(cfg.eps),
                             float(1 - std::pow(cfg.beta1, step)),
                             float(1 - std::pow(cfg.beta2, step)),
                             float(cfg.max_grad_norm)};
    for (size_t i = 0; i < cpu.all().size(); ++i) {
      const Parameter *c = cpu.all()[i], *g = gpu.all()[i];
      const std::string what = "step " + std::to_string(step) + " " + c->name;
      expect_step_matches({host(g->master), host(on_gpu.first_moment(g->name)), host(on_gpu.second_moment(g->name))},
                          {host(c->master), host(on_cpu.first_moment(c->name)), host(on_cpu.second_moment(c->name))},
                          before[i], s, c->weight_decay ? float(cfg.weight_decay) : 0.f, what);
      const std::vector<float> rounded = host(g->master.to(DType::BF16).to(DType::F32));
      ASSERT_EQ(host(g->var->value.to(DType::F32)), rounded) << what << ": the bf16 copy is not the rounded master";
    }
  }
}

#ifdef PRIMER_WITH_CUDA
// Through the launchers directly (they exist in CUDA builds only).
TEST(AdamWCuda, UnalignedViewsAndTheNormMatchTheCpuLoop) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Every tensor a view into one flat buffer at an odd element offset (as FSDP shards may be).
  int64_t total = 0;
  std::vector<int64_t> offsets;
  for (int64_t n : kSizes) offsets.push_back(total + 1), total += n + 1;
  Tensor flat[4];
  for (int b = 0; b < 4; ++b) flat[b] = test::random_on_cuda({total}, seed + uint64_t(b), DType::F32);
  flat[2] = ops::mul(flat[2], flat[2]);  // v >= 0
  Tensor compute = Tensor::zeros({total}, DType::BF16, Device::cuda());
  std::vector<std::vector<float>> h(4);
  for (int b = 0; b < 4; ++b) h[size_t(b)] = host(flat[b]);

  std::vector<optim::AdamWBuffers> gpu;
  std::vector<optim::GradSpan> spans;
  double sumsq = 0;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    const int64_t o = offsets[i], n = kSizes[i];
    auto at = [&](int b) { return flat[b].data<float>() + o; };
    gpu.push_back({at(0), at(1), at(2), at(3), static_cast<uint16_t*>(compute.data_ptr()) + o, n, i % 2 ? 0.1f : 0.f});
    spans.push_back({at(3), n});
    for (int64_t j = 0; j < n; ++j) sumsq += double(h[3][size_t(o + j)]) * h[3][size_t(o + j)];
  }
  Tensor norm = Tensor::empty({1}, DType::F32, Device::cuda());
  optim::grad_sumsq_cuda(spans, norm.data<float>());
  const float gpu_sumsq = host(norm)[0];
  EXPECT_NEAR(gpu_sumsq, sumsq, 1e-6 * sumsq);

  const optim::AdamWStep s{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.05f, 3.0f};
  const std::vector<std::vector<float>> old = h;
  optim::adamw_update_cuda(gpu, s, norm.data<float>());
  for (size_t i = 0; i < kSizes.size(); ++i) {
    const int64_t o = offsets[i];
    optim::adamw_update_cpu({&h[0][size_t(o)], &h[1][size_t(o)], &h[2][size_t(o)], &h[3][size_t(o)], nullptr, kSizes[i],
                             i % 2 ? 0.1f : 0.f},
                            s, &gpu_sumsq);
  }
  // The whole buffers compare, so the padding elements between the views must come back untouched.
  expect_step_matches({host(flat[0]), host(flat[1]), host(flat[2])}, {h[0], h[1], h[2]},
                      {old[0], old[1], old[2], old[3]}, s, 0.1f, "unaligned views");
  const std::vector<float> copy = host(compute.to(DType::F32)), master = host(flat[0].to(DType::BF16).to(DType::F32));
  for (size_t i = 0; i < kSizes.size(); ++i)
    for (int64_t j = 0; j < kSizes[i]; ++j)
      ASSERT_EQ(copy[size_t(offsets[i] + j)], master[size_t(offsets[i] + j)]) << "compute copy of tensor " << i;
  EXPECT_EQ(copy[0], 0.f) << "padding written";
}
#endif

}  // namespace
}  // namespace primer
