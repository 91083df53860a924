// Resume on another world size and ZeRO stage: a checkpoint saved on 4 ranks (ZeRO-3) resumes on 2 (ZeRO-1), 3
// (ZeRO-2) and 1 (ZeRO-0), and one saved by one process resumes on 4 (ZeRO-3); the continued loss curve and the final
// weights match the uninterrupted run (tolerances: test_train.cpp). The saving and resuming jobs are separate CTest
// tests sharing PRIMER_RESHARD_DIR (a fixture): DistReshard.SaveOnThisWorld, then DistReshard.ResumeOnThisWorld.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "tests/dist/dist_env.h"
#include "tests/dist/train_harness.h"

namespace primer::test {
namespace {

namespace fs = std::filesystem;

// The same global batch (12 rows) on 1, 2, 3 or 4 ranks; a constant learning rate after warmup, so a run cut at
// step 3 and continued to 6 sees the rates of an uninterrupted 6-step run.
TinyRun reshard_run(int64_t max_steps) {
  TinyRun run;
  run.pattern = "*-GDN";
  run.global_batch = 12;
  run.accumulation = 1;
  run.max_steps = max_steps;
  run.save_steps = 3;
  run.schedule = "constant_with_warmup";
  return run;
}

int stage_for(int world_size) { return world_size == 4 ? 3 : world_size == 3 ? 2 : world_size == 2 ? 1 : 0; }

std::string fixture_dir() {
  const char* dir = std::getenv("PRIMER_RESHARD_DIR");
  return dir ? dir : "";
}

TEST(DistReshard, SaveOnThisWorld) {
  const std::string dir = fixture_dir();
  if (dir.empty()) GTEST_SKIP() << "PRIMER_RESHARD_DIR is not set (the reshard tests run as a CTest fixture)";
  const int world = world_comm().size();
  if (world_comm().rank() == 0) fs::remove_all(fs::path(dir) / fmt::format("saved-by-{}", world));
  TinyRun run = reshard_run(3);
  run.zero_stage = stage_for(world);
  train_on_world(run, fmt::format("{}/saved-by-{}", dir, world));
  if (world_comm().rank() == 0) {
    EXPECT_TRUE(fs::exists(fmt::format("{}/saved-by-{}/checkpoint-3/manifest.json", dir, world)));
  }
}

TEST(DistReshard, ResumeOnThisWorld) {
  const std::string dir = fixture_dir();
  if (dir.empty()) GTEST_SKIP() << "PRIMER_RESHARD_DIR is not set (the reshard tests run as a CTest fixture)";
  const int world = world_comm().size();
  const char* saved_by_env = std::getenv("PRIMER_RESHARD_SAVED_BY");
  ASSERT_NE(saved_by_env, nullptr) << "PRIMER_RESHARD_SAVED_BY names the world size that saved";
  const int saved_by = std::atoi(saved_by_env);
  const std::string out = fmt::format("{}/saved-by-{}-resumed-on-{}", dir, saved_by, world);
  if (world_comm().rank() == 0) {
    fs::remove_all(out);
    fs::create_directories(out);
    fs::copy(fmt::format("{}/saved-by-{}/checkpoint-3", dir, saved_by), out + "/checkpoint-3",
             fs::copy_options::recursive);
  }
  world_comm().barrier("checkpoint copied");
  TinyRun run = reshard_run(6);
  run.zero_stage = stage_for(world);
  run.resume = "auto";
  train_on_world(run, out);
  const std::string uninterrupted = fmt::format("{}/uninterrupted-rank{}-of-{}", dir, world_comm().rank(), world);
  fs::remove_all(uninterrupted);  // the fixture directory outlives a test run: a fresh run refuses old checkpoints
  train_on_one_process(reshard_run(6), uninterrupted);

  const auto want = train_losses(uninterrupted), got = train_losses(out);
  for (int64_t step = 4; step <= 6; ++step) {
    ASSERT_TRUE(got.count(step) && want.count(step)) << "no loss at step " << step;
    EXPECT_NEAR(got.at(step), want.at(step), 1e-5 * std::fabs(want.at(step)))
        << "saved on " << saved_by << " ranks, resumed on " << world << ", step " << step;
  }
  EXPECT_FALSE(got.count(1)) << "the resumed run trained step 1 again";
  const WeightDifference d = weight_difference(out, uninterrupted);
  EXPECT_LE(d.max_relative, 1e-4) << "final weights differ most in " << d.worst_tensor;
  if (world_comm().rank() == 0)
    std::printf("saved on %d, resumed on %d: weights differ by %.3g relative L2 (%s)\n", saved_by, world,
                d.max_relative, d.worst_tensor.c_str());
}

}  // namespace
}  // namespace primer::test
