#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/check.h"

namespace primer::optim {

Schedule::Kind Schedule::parse(const std::string& name) {
  if (name == "constant_with_warmup") return Kind::ConstantWithWarmup;
  if (name == "cosine") return Kind::Cosine;
  if (name == "linear") return Kind::Linear;
  PRIMER_FAIL("unknown lr schedule '{}': expected constant_with_warmup, cosine or linear", name);
}

double Schedule::lr(int64_t step) const {
  if (step < warmup_steps) return peak_lr * double(step + 1) / double(warmup_steps);
  if (kind == Kind::ConstantWithWarmup) return peak_lr;
  const double decay_steps = double(std::max<int64_t>(total_steps - warmup_steps, 1));
  const double progress = std::clamp(double(step - warmup_steps) / decay_steps, 0.0, 1.0);
  const double factor = kind == Kind::Cosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) : 1.0 - progress;
  return min_lr + (peak_lr - min_lr) * factor;
}

}  // namespace primer::optim
