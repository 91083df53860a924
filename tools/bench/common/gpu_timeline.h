// What the GPU did during one call of a function, recorded by CUPTI's activity API (kernels, copies, memsets with
// their device timestamps), and when it sat idle: the time between the sum of the kernels that Nsight Compute lists
// and a step's wall time (docs/perf.md, "where the time goes"), without Nsight Systems.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace primer::bench {

struct TimelineGap {
  double us = 0;              // idle time between two activities
  double at_ms = 0;           // when it began, from the first activity's start
  std::string before, after;  // the activity that ended it began after, and the one that began after it
};

struct Timeline {
  double span_ms = 0;  // first activity's start to the last one's end
  double busy_ms = 0;  // the union of the activities' intervals
  int kernels = 0, copies = 0, memsets = 0;
  double kernel_ms = 0, copy_ms = 0, memset_ms = 0;  // sums of durations
  // Idle time by gap length: < 5 µs, 5–50 µs, 50–500 µs, ≥ 500 µs (count, ms).
  static constexpr std::array<double, 3> kGapBoundsUs = {5, 50, 500};
  std::array<int, 4> gap_count{};
  std::array<double, 4> gap_ms{};
  std::vector<TimelineGap> largest;  // the longest gaps, longest first
};

// One recorded activity: CUPTI's device timestamps (ns); a kernel's mangled name (empty for copies and memsets).
struct TimelineActivity {
  enum class Kind { Kernel, Copy, Memset };
  Kind kind;
  uint64_t start, end;
  std::string name;
};

// The summary of a recording in any order (what gpu_timeline returns), kept apart for tests: counts and durations
// by kind, the union of the intervals as the busy time, the gaps between them bucketed, the `keep` longest listed
// with the activity the gap followed (the one whose end opened it) and the one that closed it.
Timeline summarise_timeline(std::vector<TimelineActivity> activities, size_t keep);

// Runs fn once (after a device synchronisation) with CUPTI recording, synchronises, and summarises the activity;
// `largest` keeps the `keep` longest gaps. The first call records a memset beforehand and drops it: CUPTI sets itself
// up on the first recorded call, which would otherwise show as an idle gap in fn's timeline.
Timeline gpu_timeline(const std::function<void()>& fn, size_t keep = 12);

// The summary as markdown tables (a row per figure, then the longest gaps with their neighbours).
void print_timeline(const Timeline& t);

}  // namespace primer::bench
