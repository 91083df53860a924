// Learning-rate schedules: linear warmup to the peak, then constant, cosine or linear decay to min_lr.
#pragma once
#include <cstdint>
#include <string>

namespace primer::optim {

struct Schedule {
  enum class Kind { ConstantWithWarmup, Cosine, Linear } kind = Kind::Cosine;
  double peak_lr = 1e-3;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  static Kind parse(const std::string& name);  // "constant_with_warmup", "cosine", "linear"
  double lr(int64_t step) const;               // step counts from 0
};

}  // namespace primer::optim
