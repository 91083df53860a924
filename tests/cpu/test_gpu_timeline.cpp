// tools/bench/common/gpu_timeline's summary of a recording (the CUPTI side needs a GPU; its arithmetic does not):
// counts and durations by kind, the union of overlapping and nested intervals as the busy time, the gaps between
// them by length, the longest named after their neighbours with kernel names shortened.
#include <gtest/gtest.h>

#include "tools/bench/common/gpu_timeline.h"

namespace primer {
namespace {

using bench::TimelineActivity;
using Kind = TimelineActivity::Kind;

TEST(GpuTimeline, SummarisesOverlapsGapsAndNames) {
  const std::string templated = "_ZN6primer3ops8cuda_ops12_GLOBAL__N_114forward_kernelIfLi4EEEvPT_";
  // Out of order, as CUPTI's buffers may hand them over (ns).
  const std::vector<TimelineActivity> recorded = {
      {Kind::Kernel, 612000, 613000, "_Z3fooPf"},  // after a 600 µs gap
      {Kind::Kernel, 0, 1000, templated},
      {Kind::Copy, 10000, 12000, ""},             // after a 6.5 µs gap
      {Kind::Kernel, 500, 3000, "_Z3barv"},       // overlaps the first kernel and ends the group
      {Kind::Kernel, 2500, 2600, templated},      // nested in bar and started last: neither extends nor opens anything
      {Kind::Memset, 3002, 3500, ""},             // 2 ns after bar
      {Kind::Kernel, 613100, 613200, "_Z3bazv"},  // 0.1 µs after foo
  };
  const bench::Timeline t = bench::summarise_timeline(recorded, 3);
  EXPECT_EQ(t.kernels, 5);
  EXPECT_EQ(t.copies, 1);
  EXPECT_EQ(t.memsets, 1);
  EXPECT_DOUBLE_EQ(t.kernel_ms, 4700e-6);
  EXPECT_DOUBLE_EQ(t.copy_ms, 2000e-6);
  EXPECT_DOUBLE_EQ(t.memset_ms, 498e-6);
  EXPECT_DOUBLE_EQ(t.span_ms, 613200e-6);
  EXPECT_DOUBLE_EQ(t.busy_ms, (3000 + 498 + 2000 + 1000 + 100) * 1e-6);
  EXPECT_EQ(t.gap_count, (std::array<int, 4>{2, 1, 0, 1}));
  EXPECT_NEAR(t.gap_ms[0], (2 + 100) * 1e-6, 1e-15);
  EXPECT_NEAR(t.gap_ms[1], 6500e-6, 1e-15);
  EXPECT_NEAR(t.gap_ms[3], 600000e-6, 1e-15);
  EXPECT_NEAR(t.span_ms - t.busy_ms, (2 + 6500 + 600000 + 100) * 1e-6, 1e-12);

  ASSERT_EQ(t.largest.size(), 3u);  // kept: the three longest, longest first
  EXPECT_DOUBLE_EQ(t.largest[0].us, 600);
  EXPECT_DOUBLE_EQ(t.largest[0].at_ms, 12000e-6);
  EXPECT_EQ(t.largest[0].before, "(copy)");
  EXPECT_EQ(t.largest[0].after, "foo");
  EXPECT_DOUBLE_EQ(t.largest[1].us, 6.5);
  EXPECT_EQ(t.largest[1].before, "(memset)");
  EXPECT_EQ(t.largest[1].after, "(copy)");
  EXPECT_DOUBLE_EQ(t.largest[2].us, 0.1);
  EXPECT_EQ(t.largest[2].before, "foo");
  EXPECT_EQ(t.largest[2].after, "baz");

  // The gap after the overlapping group follows the activity that ended it (bar), not the last one to start.
  const bench::Timeline all = bench::summarise_timeline(recorded, 10);
  ASSERT_EQ(all.largest.size(), 4u);
  EXPECT_DOUBLE_EQ(all.largest[3].us, 0.002);
  EXPECT_EQ(all.largest[3].before, "bar");
  EXPECT_EQ(all.largest[3].after, "(memset)");

  // A templated kernel in primer's namespaces reads as its name and arguments.
  const bench::Timeline one =
      bench::summarise_timeline({{Kind::Kernel, 0, 10, templated}, {Kind::Kernel, 20, 30, "not a mangled name"}}, 1);
  ASSERT_EQ(one.largest.size(), 1u);
  EXPECT_EQ(one.largest[0].before, "forward_kernel<float, 4>");
  EXPECT_EQ(one.largest[0].after, "not a mangled name");
}

TEST(GpuTimeline, NothingRecordedIsAnEmptySummary) {
  const bench::Timeline t = bench::summarise_timeline({}, 5);
  EXPECT_EQ(t.kernels + t.copies + t.memsets, 0);
  EXPECT_EQ(t.span_ms, 0);
  EXPECT_TRUE(t.largest.empty());
}

}  // namespace
}  // namespace primer
