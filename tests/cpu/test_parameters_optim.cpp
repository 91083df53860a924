// Parameter registry (layout-independent init, trainable selection, released masters) and AdamW against the textbook
// update.
#include <gtest/gtest.h>

#include <cmath>

#include "core/parameters.h"
#include "core/rng.h"
#include "core/storage.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

TEST(Parameters, InitDependsOnNameAndIndexOnly) {
  ParameterRegistry a, b;
  a.add("model.layers.0.mlp.up_proj.weight", {16, 8}, InitRule::normal(0.02));
  a.add("model.norm.weight", {8}, InitRule::constant(1.0), false);
  // Registered in the other order, with an extra parameter in between: the same values come out.
  b.add("model.norm.weight", {8}, InitRule::constant(1.0), false);
  b.add("extra", {3}, InitRule::normal(1.0));
  b.add("model.layers.0.mlp.up_proj.weight", {16, 8}, InitRule::normal(0.02));
  a.materialize(Device::cpu(), DType::F32, 7);
  b.materialize(Device::cpu(), DType::F32, 7);
  const auto va = a.get("model.layers.0.mlp.up_proj.weight").master.to_vector<float>();
  EXPECT_EQ(va, b.get("model.layers.0.mlp.up_proj.weight").master.to_vector<float>());
  EXPECT_FLOAT_EQ(va[37], float(0.02 * normal01(key_for(7, "model.layers.0.mlp.up_proj.weight"), 37)));
  EXPECT_EQ(a.get("model.norm.weight").master.to_vector<float>(), std::vector<float>(8, 1.0f));
  EXPECT_THROW(a.add("model.norm.weight", {8}, InitRule::constant(1.0)), Error);
  EXPECT_THROW(a.get("model.nrom.weight"), Error);
}

TEST(Parameters, TrainableBySubstring) {
  ParameterRegistry r;
  r.add("model.layers.0.gka.q_proj.weight", {2}, InitRule::constant(0));
  r.add("model.layers.0.mlp.up_proj.weight", {2}, InitRule::constant(0));
  r.set_trainable({"gka."});
  EXPECT_EQ(r.trainable().size(), 1u);
  EXPECT_EQ(r.trainable()[0]->name, "model.layers.0.gka.q_proj.weight");
  EXPECT_EQ(r.count(true), 2);
  EXPECT_EQ(r.count(false), 4);
}

// A master is released only where the compute copy can stand for it: Stage 1's frozen teacher loaded from bf16
// weights keeps its bf16 copy alone, while trainable weights, weights bf16 would round (one element is enough) and
// f32-compute parameters keep their masters; inference releases every master that is not the compute copy itself.
TEST(Parameters, ReleasesOnlyMastersTheComputeCopyHoldsExactly) {
  ParameterRegistry r;
  r.add("teacher.exact", {3, 5}, InitRule::normal(0.02));
  r.add("teacher.one_inexact", {7}, InitRule::normal(0.02));
  r.add("teacher.f32_compute", {4}, InitRule::normal(0.02)).keep_f32 = true;
  r.add("student.exact", {6}, InitRule::normal(0.02));
  r.materialize(Device::cpu(), DType::BF16, test::fresh_seed());
  for (Parameter* p : r.all()) p->master.copy_from(p->master.to(DType::BF16));  // as loaded from bf16 weights
  float* one = r.get("teacher.one_inexact").master.data<float>();
  one[3] = std::nextafter(one[3], 1.0f);  // the low 16 bits no longer zero: bf16 rounds it
  r.sync_compute_copies();
  r.set_trainable({"student."});
  EXPECT_TRUE(representable_in(r.get("teacher.exact").master, DType::BF16));
  EXPECT_FALSE(representable_in(r.get("teacher.one_inexact").master, DType::BF16));
  const std::vector<float> exact = r.get("teacher.exact").master.to_vector<float>();

  EXPECT_EQ(r.release_masters(MasterRelease::FrozenExact), 15 * 4);
  const Parameter& released = r.get("teacher.exact");
  EXPECT_FALSE(released.master.defined());
  EXPECT_EQ(released.exact_value().dtype(), DType::BF16);
  EXPECT_EQ(released.exact_value().to_vector<float>(), exact);
  for (const char* kept : {"teacher.one_inexact", "teacher.f32_compute", "student.exact"})
    EXPECT_TRUE(r.get(kept).master.defined()) << kept;
  r.sync_compute_copies();  // skips the released master, refreshes the rest
  EXPECT_EQ(released.var->value.to_vector<float>(), exact);

  EXPECT_EQ(r.release_masters(MasterRelease::All), (7 + 6) * 4);
  EXPECT_TRUE(r.get("teacher.f32_compute").master.defined());  // its compute copy is the master itself
  EXPECT_EQ(r.release_masters(MasterRelease::All), 0);
}

// Inference's load: compute copies made one parameter at a time equal materializing then releasing every master,
// bit for bit, in every compute dtype (f32-kept parameters keep their master, which is their compute copy), and the
// peak holds no whole set of f32 masters beside the bf16 copies.
TEST(Parameters, ComputeCopiesAloneEqualMaterializingThenReleasing) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto declare = [](ParameterRegistry& r) {
    for (int i = 0; i < 16; ++i) r.add("w" + std::to_string(i), {32, 16}, InitRule::normal(0.02));
    r.add("A_log", {8}, InitRule::log_uniform(1e-4, 16.0), false).keep_f32 = true;
  };
  for (const DType compute : {DType::F32, DType::BF16, DType::F64}) {
    SCOPED_TRACE(dtype_name(compute));
    ParameterRegistry released, direct;
    declare(released);
    declare(direct);
    size_t before = memory_stats(Device::cpu()).current;
    reset_peak_memory(Device::cpu());
    released.materialize(Device::cpu(), compute, seed);
    released.release_masters(MasterRelease::All);
    const size_t released_peak = memory_stats(Device::cpu()).peak - before;
    before = memory_stats(Device::cpu()).current;
    reset_peak_memory(Device::cpu());
    direct.materialize_compute_copies(Device::cpu(), compute, initial_values(seed));
    const size_t direct_peak = memory_stats(Device::cpu()).peak - before;
    for (Parameter* p : released.all()) {
      const Parameter& q = direct.get(p->name);
      EXPECT_EQ(q.master.defined(), p->master.defined()) << p->name;
      EXPECT_EQ(q.var->value.dtype(), p->var->value.dtype()) << p->name;
      EXPECT_EQ(q.var->value.to_vector<double>(), p->var->value.to_vector<double>()) << p->name;
    }
    // Under bf16 the 16 weights' f32 masters (32 KB) never coexist with their copies: one weight in flight.
    if (compute == DType::BF16) {
      const size_t bf16_copies = 16 * 32 * 16 * 2, one_weight = 32 * 16 * (4 + 2);
      EXPECT_GE(released_peak, bf16_copies + 16 * 32 * 16 * 4);
      EXPECT_LE(direct_peak, bf16_copies + 8 * 4 + one_weight);
    }
  }
  ParameterRegistry wrong;
  wrong.add("w", {2, 3}, InitRule::normal(0.02));
  test::expect_error(
      [&] {
        wrong.materialize_compute_copies(Device::cpu(), DType::F32, [](const Parameter&) {
          return Tensor::zeros({3, 2}, DType::F32);
        });
      },
      {"parameter 'w'", "expected f32 of shape [2, 3]"});
}

TEST(AdamW, MatchesTheTextbookUpdateWithClipping) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ParameterRegistry r;
  r.add("w", {50}, InitRule::normal(1.0));
  r.add("norm", {10}, InitRule::normal(1.0), false);
  r.materialize(Device::cpu(), DType::F32, seed);
  optim::AdamWConfig cfg;
  cfg.max_grad_norm = 0.5;
  optim::AdamW opt(r, cfg);
  std::map<std::string, std::vector<double>> p, m, v;
  for (Parameter* q : r.all()) {
    p[q->name] = q->master.to_vector<double>();
    m[q->name].assign(p[q->name].size(), 0.0);
    v[q->name].assign(p[q->name].size(), 0.0);
  }
  for (int step = 1; step <= 3; ++step) {
    std::map<std::string, std::vector<double>> g;
    double sumsq = 0;
    for (Parameter* q : r.all()) {
      q->var->grad = test::randn(q->shape, seed + 10 * step + q->name.size(), DType::F32);
      g[q->name] = q->var->grad.to_vector<double>();
      for (double x : g[q->name]) sumsq += x * x;
    }
    const double lr = 1e-2 * step;
    opt.step(lr);
    const double coef = std::min(1.0, cfg.max_grad_norm / (std::sqrt(sumsq) + 1e-6));
    EXPECT_NEAR(opt.grad_norm(), std::sqrt(sumsq), 1e-5 * std::sqrt(sumsq));
    for (Parameter* q : r.all()) {
      const double wd = q->weight_decay ? cfg.weight_decay : 0.0;
      auto& pp = p[q->name];
      for (size_t i = 0; i < pp.size(); ++i) {
        const double gi = g[q->name][i] * coef;
        m[q->name][i] = cfg.beta1 * m[q->name][i] + (1 - cfg.beta1) * gi;
        v[q->name][i] = cfg.beta2 * v[q->name][i] + (1 - cfg.beta2) * gi * gi;
        const double mh = m[q->name][i] / (1 - std::pow(cfg.beta1, step));
        const double vh = v[q->name][i] / (1 - std::pow(cfg.beta2, step));
        pp[i] -= lr * (mh / (std::sqrt(vh) + cfg.eps) + wd * pp[i]);
      }
      const auto got = q->master.to_vector<double>();
      // f32 master arithmetic against f64: a few ulps of |p| per step.
      for (size_t i = 0; i < pp.size(); ++i)
        EXPECT_NEAR(got[i], pp[i], 1e-5 * (1 + std::abs(pp[i]))) << q->name << "[" << i << "]";
    }
  }
}

TEST(Schedule, WarmupThenDecay) {
  optim::Schedule s{optim::Schedule::Kind::Cosine, 1.0, 0.1, 10, 110};
  EXPECT_DOUBLE_EQ(s.lr(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(9), 1.0);
  EXPECT_NEAR(s.lr(60), 0.55, 1e-12);  // halfway through the cosine
  EXPECT_NEAR(s.lr(110), 0.1, 1e-12);
  s.kind = optim::Schedule::Kind::Linear;
  EXPECT_NEAR(s.lr(60), 0.55, 1e-12);
  s.kind = optim::Schedule::Kind::ConstantWithWarmup;
  EXPECT_DOUBLE_EQ(s.lr(100), 1.0);
  EXPECT_THROW(optim::Schedule::parse("cosin"), Error);
}

}  // namespace
}  // namespace primer

namespace primer {
namespace {

// A caller that refuses non-finite updates asks before stepping (the train loop's nan_policy); the norm it read is
// the one the step then clips with.
TEST(AdamW, ReportsANonFiniteGradientNormBeforeStepping) {
  ParameterRegistry r;
  r.add("model.a", {4}, InitRule::constant(1.0));
  r.add("model.b", {3}, InitRule::constant(2.0));
  r.materialize(Device::cpu(), DType::F32, 1);
  optim::AdamW opt(r, {});
  r.get("model.a").var->grad = Tensor::full({4}, 0.5, DType::F32);
  r.get("model.b").var->grad = Tensor::from_vector(std::vector<float>{0.f, NAN, 1.f}, {3}, DType::F32);
  EXPECT_FALSE(opt.gradient_norm_finite());
  EXPECT_EQ(r.get("model.a").master.to_vector<float>(), std::vector<float>(4, 1.0f));  // nothing applied
  EXPECT_EQ(opt.steps(), 0);
  r.get("model.b").var->grad = Tensor::full({3}, 0.0, DType::F32);
  ASSERT_TRUE(opt.gradient_norm_finite());
  EXPECT_DOUBLE_EQ(opt.grad_norm(), 1.0);
  opt.step(1e-3);
  EXPECT_EQ(opt.steps(), 1);
  EXPECT_LT(r.get("model.a").master.to_vector<float>()[0], 1.0f);
}

}  // namespace
}  // namespace primer
