// Multi-rank training equals one process: the loss of every step and the final weights, for every ZeRO stage, with
// gradient accumulation and recomputation, on a Transformer, on a hybrid with GKA, GDN and Mamba-2 layers, and for
// Stage 1 on a fused teacher-student model; `primer export` of a sharded checkpoint.
//
// Tolerance. Both runs compute in f32 on the same rows; they differ only in the order in which per-row gradient
// contributions are summed (each rank sums its rows, then the ranks' sums are added), and in the loss's summation
// order. f32 rounding puts that at a few units of 2^-24 ≈ 6e-8 relative per sum, which the layers amplify where they
// divide or exponentiate (Mamba-2's gates and scan, GKA's solve). AdamW would amplify it without bound where a
// gradient element is near zero (its update g/(√v + ε) is then ±lr whatever the size of g), so the recipes use
// ε = 1e-6 (tests/dist/train_harness.cpp): an update is then a smooth function of gradients down to 1e-6, and the
// comparison measures the sharding, not AdamW's sign function. Measured (2 and 3 ranks, every stage): losses agree
// to < 1e-7 relative; final weights to ≤ 1.2e-5 relative L2 per tensor (the hybrid's GKA k_proj; ≤ 4e-6 elsewhere).
// The bounds keep a factor of eight to a hundred over that: 1e-5 on losses, 1e-4 on weights. A wrong shard, a lost
// or doubled micro-batch or rank, or a stale gathered weight moves a tensor by an AdamW step (lr = 3e-3 on weights
// of scale 0.02: ~1e-1 relative) — three orders of magnitude above either bound.
#include <gtest/gtest.h>

#include "recipes/hf_transfer.h"
#include "tests/dist/dist_env.h"
#include "tests/dist/train_harness.h"

namespace primer::test {
namespace {

constexpr double kLossTolerance = 1e-5;    // relative, per step
constexpr double kWeightTolerance = 1e-4;  // relative L2, per tensor

TEST(DistTrain, EveryZeroStageOnATransformerEqualsOneProcess) {
  const std::string dir = shared_test_dir("transformer");
  TinyRun run;  // tied embeddings, accumulation 2, recomputation on
  run.global_batch = 2 * world_comm().size();
  const std::string reference = fmt::format("{}/reference-rank{}", dir, world_comm().rank());
  train_on_one_process(run, reference);
  for (int stage = 0; stage <= 3; ++stage) {
    run.zero_stage = stage;
    const std::string out = fmt::format("{}/zero{}", dir, stage);
    train_on_world(run, out);
    expect_same_training(reference, out, {kLossTolerance, kWeightTolerance},
                         fmt::format("ZeRO-{} on {} ranks", stage, world_comm().size()));
    // `primer export` of the run's sharded checkpoint writes the weights the run itself exported, exactly.
    if (world_comm().rank() == 0) {
      ASSERT_EQ(recipes::run_export(out + ".yaml", {}, "latest", out + "-export", DType::F32), 0);
      EXPECT_EQ(weight_difference(out + "-export", out).max_abs, 0.0)
          << "export of the ZeRO-" << stage << " checkpoint";
    }
    world_comm().barrier("export checked");
  }
}

TEST(DistTrain, HybridWithGkaGdnMamba2EqualsOneProcess) {
  const std::string dir = shared_test_dir("hybrid");
  TinyRun run;
  run.pattern = "*-GKA-GDN-M2";
  run.tied = false;
  run.global_batch = 2 * world_comm().size();
  run.max_steps = 2;
  const std::string reference = fmt::format("{}/reference-rank{}", dir, world_comm().rank());
  train_on_one_process(run, reference);
  for (int stage : {1, 3}) {
    run.zero_stage = stage;
    const std::string out = fmt::format("{}/zero{}", dir, stage);
    train_on_world(run, out);
    expect_same_training(reference, out, {kLossTolerance, kWeightTolerance},
                         fmt::format("hybrid, ZeRO-{} on {} ranks", stage, world_comm().size()));
  }
}

TEST(DistTrain, WithoutRecomputationEqualsOneProcess) {
  const std::string dir = shared_test_dir("no-recompute");
  TinyRun run;
  run.pattern = "*-GDN";
  run.recompute = false;
  run.zero_stage = 3;
  run.global_batch = 2 * world_comm().size();
  run.max_steps = 2;
  const std::string reference = fmt::format("{}/reference-rank{}", dir, world_comm().rank());
  train_on_one_process(run, reference);
  train_on_world(run, dir + "/zero3");
  expect_same_training(reference, dir + "/zero3", {kLossTolerance, kWeightTolerance}, "no recomputation, ZeRO-3");
}

TEST(DistTrain, Stage1OnAFusedModelEqualsOneProcess) {
  const std::string dir = shared_test_dir("stage1");
  TinyRun run;
  run.pattern = "*DA-GKA*-M2*";
  run.distill = true;
  run.learnable = "gka,mamba";
  run.global_batch = 2 * world_comm().size();
  run.max_steps = 2;
  const std::string reference = fmt::format("{}/reference-rank{}", dir, world_comm().rank());
  train_on_one_process(run, reference);
  for (int stage : {0, 3}) {
    run.zero_stage = stage;
    const std::string out = fmt::format("{}/zero{}", dir, stage);
    train_on_world(run, out);
    expect_same_training(reference, out, {kLossTolerance, kWeightTolerance},
                         fmt::format("Stage 1, ZeRO-{} on {} ranks", stage, world_comm().size()));
  }
}

}  // namespace
}  // namespace primer::test
