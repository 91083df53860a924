#include "core/eta.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace primer {

void EtaEstimate::add(double seconds) {
  recent_.push_back(seconds);
  if (recent_.size() > window_) recent_.pop_front();
}

double EtaEstimate::remaining(double items_left) const {
  if (recent_.empty()) return std::nan("");
  std::vector<double> sorted(recent_.begin(), recent_.end());
  const size_t mid = sorted.size() / 2;
  std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(mid), sorted.end());
  double median = sorted[mid];
  if (sorted.size() % 2 == 0)  // the mean of the two middle ones; nth_element left the lower one below mid
    median = (median + *std::max_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(mid))) / 2;
  return median * std::max(items_left, 0.0);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = int64_t(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02d}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02d}h", s / 86400, s % 86400 / 3600);
}

}  // namespace primer
