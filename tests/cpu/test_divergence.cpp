// Divergence handling of the train loop: nan_policy's decisions and wording, and the loss spike warning. (The loop
// end to end, with an injected NaN gradient: tests/cpu/test_trainer.cpp.)
#include <gtest/gtest.h>

#include "core/eta.h"
#include "recipes/divergence.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

TEST(Divergence, StopNamesTheStepParameterAndLayer) {
  recipes::DivergenceGuard guard({});
  test::expect_error(
      [&] { guard.nonfinite_gradient(7, "model.layers.12.mlp.up_proj.weight", NAN); },
      {"step 7: non-finite gradient (NaN or inf), first in 'model.layers.12.mlp.up_proj.weight' (layer 12)",
       "the step's loss is nan", "the run stops (nan_policy: stop)"});
  test::expect_error([&] { guard.nonfinite_gradient(8, "", 2.5); },
                     {"step 8: the squared gradient norm overflowed (every gradient is finite; the loss is 2.5000)"});
  EXPECT_EQ(recipes::layer_of("model.embed_tokens.weight"), "");
}

TEST(Divergence, SkipSaysSoUntilTheLimit) {
  recipes::DivergenceGuard guard({true, 2, 0});
  testing::internal::CaptureStdout();
  guard.nonfinite_gradient(3, "model.norm.weight", 1.0);
  guard.nonfinite_gradient(5, "model.norm.weight", 1.0);
  const std::string log = testing::internal::GetCapturedStdout();
  EXPECT_NE(log.find("train step      3 | non-finite gradient (NaN or inf), first in 'model.norm.weight'; the step's "
                     "loss is 1.0000: update skipped (1 of nan_skip_limit 2)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("update skipped (2 of nan_skip_limit 2)"), std::string::npos) << log;
  test::expect_error([&] { guard.nonfinite_gradient(9, "model.norm.weight", 1.0); },
                     {"step 9:", "3 steps had a non-finite gradient, more than nan_skip_limit 2", "the run stops"});
}

// loss > loss_spike_factor × the mean of the previous logged losses, once there are enough of them to mean anything.
TEST(Divergence, LossSpikeIsWarnedAbout) {
  recipes::DivergenceGuard guard({false, 0, 3.0});
  testing::internal::CaptureStdout();
  guard.logged_loss(1, 9.0);  // too early to judge: only the first kSpikeMinHistory losses
  for (int64_t step = 2; step <= 5; ++step) guard.logged_loss(step, 2.0);
  guard.logged_loss(6, 9.0);   // 9 < 3 × mean(9, 2, 2, 2, 2) = 10.2
  guard.logged_loss(7, 14.0);  // 14 > 3 × mean(9, 2, 2, 2, 2, 9) = 13
  const std::string log = testing::internal::GetCapturedStdout();
  EXPECT_EQ(log.find("train step      6"), std::string::npos) << log;
  EXPECT_NE(
      log.find("train step      7 | warning: loss spike: 14.0000 is 3.2x the mean 4.3333 of the previous 6 logged "
               "losses (loss_spike_factor 3)"),
      std::string::npos)
      << log;
  recipes::DivergenceGuard off({false, 0, 0});
  testing::internal::CaptureStdout();
  for (int64_t step = 1; step <= 6; ++step) off.logged_loss(step, 1.0);
  off.logged_loss(7, 100.0);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

// The remaining time is the median recent item's duration times the items left: one slow item does not move it.
TEST(Eta, MedianOfRecentItemsTimesItemsLeft) {
  EtaEstimate eta(4);
  EXPECT_EQ(format_duration(eta.remaining(10)), "?");
  for (double s : {1.0, 1.0, 30.0, 1.0}) eta.add(s);
  EXPECT_DOUBLE_EQ(eta.remaining(10), 10.0);
  for (double s : {2.0, 2.0, 2.0}) eta.add(s);  // the window keeps the last 4: 1, 2, 2, 2
  EXPECT_DOUBLE_EQ(eta.remaining(10), 20.0);
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(725), "12m05s");
  EXPECT_EQ(format_duration(3 * 3600 + 7 * 60 + 20), "3h07m");
  EXPECT_EQ(format_duration(2 * 86400 + 4 * 3600), "2d04h");
}

}  // namespace
}  // namespace primer
