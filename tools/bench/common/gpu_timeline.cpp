#include "tools/bench/common/gpu_timeline.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/check.h"
#include "tools/bench/common/bench_util.h"

#ifdef PRIMER_WITH_CUDA
#include <cupti.h>

#include "core/cuda_runtime.h"
#include "core/tensor.h"
#endif

namespace primer::bench {
namespace {
using Kind = TimelineActivity::Kind;
}  // namespace

#ifdef PRIMER_WITH_CUDA
namespace {

#define PRIMER_CUPTI_CHECK(call)                                                 \
  do {                                                                           \
    const CUptiResult result_ = (call);                                          \
    if (result_ != CUPTI_SUCCESS) {                                              \
      const char* message_ = nullptr;                                            \
      cuptiGetResultString(result_, &message_);                                  \
      PRIMER_FAIL("{}: {}", #call, message_ ? message_ : "unknown CUPTI error"); \
    }                                                                            \
  } while (0)

// CUPTI's buffer callbacks carry no user pointer: the records of the one recording in progress go here.
std::vector<TimelineActivity>* g_records = nullptr;
constexpr size_t kBufferBytes = size_t(8) << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (g_records && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      g_records->push_back({Kind::Kernel, k->start, k->end, k->name ? k->name : "?"});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      g_records->push_back({Kind::Copy, c->start, c->end, ""});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      g_records->push_back({Kind::Memset, m->start, m->end, ""});
    }
  }
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

}  // namespace

Timeline gpu_timeline(const std::function<void()>& fn, size_t keep) {
  static const bool registered = [] {
    PRIMER_CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    return true;
  }();
  (void)registered;
  const auto record = [](const std::function<void()>& f) {
    std::vector<TimelineActivity> records;
    cuda::synchronize();
    g_records = &records;
    for (const CUpti_ActivityKind kind : kKinds) PRIMER_CUPTI_CHECK(cuptiActivityEnable(kind));
    f();
    cuda::synchronize();
    for (const CUpti_ActivityKind kind : kKinds) PRIMER_CUPTI_CHECK(cuptiActivityDisable(kind));
    PRIMER_CUPTI_CHECK(cuptiActivityFlushAll(1));
    g_records = nullptr;
    return records;
  };
  static const bool warmed_up = [&] {
    record([] { Tensor::empty({1}, DType::F32, Device::cuda()).zero_(); });
    return true;
  }();
  (void)warmed_up;
  return summarise_timeline(record(fn), keep);
}

#else
Timeline gpu_timeline(const std::function<void()>&, size_t) { PRIMER_FAIL("gpu_timeline needs a CUDA build"); }
#endif

namespace {

// A kernel's name as a reader wants it: demangled, without its parameter list, return type and primer's namespaces.
std::string short_name(const TimelineActivity& a) {
  if (a.kind == Kind::Copy) return "(copy)";
  if (a.kind == Kind::Memset) return "(memset)";
  int status = 0;
  char* demangled = abi::__cxa_demangle(a.name.c_str(), nullptr, nullptr, &status);
  std::string s = status == 0 && demangled ? demangled : a.name;
  std::free(demangled);
  int depth = 0;  // cut at the parameter list's '(' (the first one outside template brackets)
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0 && s.compare(i, 21, "(anonymous namespace)") != 0) {
      s.resize(i);
      break;
    }
  }
  for (const char* prefix : {"void ", "primer::ops::cuda_ops::", "primer::", "(anonymous namespace)::"})
    for (size_t at; (at = s.find(prefix)) != std::string::npos;) s.erase(at, std::char_traits<char>::length(prefix));
  return s.size() > 90 ? s.substr(0, 87) + "..." : s;
}

}  // namespace

Timeline summarise_timeline(std::vector<TimelineActivity> records, size_t keep) {
  Timeline t;
  if (records.empty()) return t;
  std::sort(records.begin(), records.end(),
            [](const TimelineActivity& a, const TimelineActivity& b) { return a.start < b.start; });
  for (const TimelineActivity& a : records) {
    const double ms = double(a.end - a.start) * 1e-6;
    if (a.kind == Kind::Kernel) ++t.kernels, t.kernel_ms += ms;
    if (a.kind == Kind::Copy) ++t.copies, t.copy_ms += ms;
    if (a.kind == Kind::Memset) ++t.memsets, t.memset_ms += ms;
  }
  // The union of the intervals, walked in start order; a gap opens where the next start passes every end so far.
  uint64_t end = records[0].end, busy = 0, begin = records[0].start;
  size_t last = 0;  // the activity whose end is `end`
  for (size_t i = 1; i < records.size(); ++i) {
    const TimelineActivity& a = records[i];
    if (a.start > end) {
      busy += end - begin;
      const double us = double(a.start - end) * 1e-3;
      size_t bucket = 0;
      while (bucket < Timeline::kGapBoundsUs.size() && us >= Timeline::kGapBoundsUs[bucket]) ++bucket;
      ++t.gap_count[bucket];
      t.gap_ms[bucket] += us * 1e-3;
      t.largest.push_back({us, double(end - records[0].start) * 1e-6, short_name(records[last]), short_name(a)});
      begin = a.start;
    }
    if (a.end > end || a.start > end) end = a.end, last = i;
  }
  busy += end - begin;
  t.span_ms = double(end - records[0].start) * 1e-6;
  t.busy_ms = double(busy) * 1e-6;
  std::sort(t.largest.begin(), t.largest.end(), [](const TimelineGap& a, const TimelineGap& b) { return a.us > b.us; });
  if (t.largest.size() > keep) t.largest.resize(keep);
  return t;
}

void print_timeline(const Timeline& t) {
  auto ms = [](double v) { return fixed(v, 2) + " ms"; };
  const double idle = t.span_ms - t.busy_ms;
  std::vector<Row> rows = {
      {{"GPU span (first activity to last)", ms(t.span_ms)}},
      {{"busy (union of kernels, copies, memsets)",
        ms(t.busy_ms) + " (" + fixed(100 * t.busy_ms / t.span_ms, 1) + "%)"}},
      {{"kernels", std::to_string(t.kernels) + ", " + ms(t.kernel_ms)}},
      {{"copies", std::to_string(t.copies) + ", " + ms(t.copy_ms)}},
      {{"memsets", std::to_string(t.memsets) + ", " + ms(t.memset_ms)}},
      {{"idle", ms(idle)}},
  };
  const char* buckets[] = {"idle in gaps < 5 µs", "idle in gaps of 5–50 µs", "idle in gaps of 50–500 µs",
                           "idle in gaps ≥ 500 µs"};
  for (size_t b = 0; b < t.gap_count.size(); ++b)
    rows.push_back({{buckets[b], std::to_string(t.gap_count[b]) + " gaps, " + ms(t.gap_ms[b])}});
  print_table({"GPU timeline", "value"}, rows);
  std::vector<Row> gaps;
  for (const TimelineGap& g : t.largest)
    gaps.push_back({{fixed(g.us, 1), fixed(g.at_ms, 2), "`" + g.before + "`", "`" + g.after + "`"}});
  if (!gaps.empty()) print_table({"gap µs", "at ms", "after", "before"}, gaps);
}

}  // namespace primer::bench
