// Remaining-time estimates for long loops: the median duration of the recent items times the items left. A median,
// so that an item slowed by something else (an evaluation, a checkpoint, a cold cache) does not swing the estimate.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

namespace primer {

class EtaEstimate {
 public:
  explicit EtaEstimate(size_t window = 20) : window_(window) {}
  void add(double seconds);                   // one more item took this long
  double remaining(double items_left) const;  // seconds; NaN before the first item
  bool empty() const { return recent_.empty(); }

 private:
  size_t window_;
  std::deque<double> recent_;
};

// "45s", "12m05s", "3h07m", "2d04h"; "?" when not finite or negative.
std::string format_duration(double seconds);

}  // namespace primer
