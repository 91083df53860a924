#include "recipes/divergence.h"

#include <fmt/format.h>

#include <numeric>

#include "core/check.h"

namespace primer::recipes {

std::string layer_of(const std::string& parameter) {
  const std::string prefix = "model.layers.";
  if (!parameter.starts_with(prefix)) return "";
  const size_t end = parameter.find('.', prefix.size());
  return fmt::format(" (layer {})", parameter.substr(prefix.size(), end - prefix.size()));
}

DivergencePolicy divergence_policy(const config::Config& cfg) {
  return {cfg.get_string("nan_policy") == "skip", cfg.get_int("nan_skip_limit"), cfg.get_float("loss_spike_factor")};
}

void DivergenceGuard::nonfinite_gradient(int64_t step, const std::string& parameter, double loss) {
  const std::string what =
      parameter.empty()
          ? fmt::format("step {}: the squared gradient norm overflowed (every gradient is finite; the loss is {:.4f})",
                        step, loss)
          : fmt::format("step {}: non-finite gradient (NaN or inf), first in '{}'{}; the step's loss is {:.4f}", step,
                        parameter, layer_of(parameter), loss);
  PRIMER_CHECK(policy_.skip,
               "{}: the update was not applied and the run stops (nan_policy: stop); resume from the last checkpoint "
               "with a lower learning_rate or max_grad_norm, or set nan_policy: skip",
               what);
  ++skipped_;
  PRIMER_CHECK(skipped_ <= policy_.skip_limit,
               "{}: {} steps had a non-finite gradient, more than nan_skip_limit {}; the run stops without applying "
               "this update",
               what, skipped_, policy_.skip_limit);
  const std::string without_step = what.substr(what.find(": ") + 2);  // the line names the step already
  fmt::print("train step {:6d} | {}: update skipped ({} of nan_skip_limit {})\n", step, without_step, skipped_,
             policy_.skip_limit);
}

void DivergenceGuard::logged_loss(int64_t step, double loss) {
  if (policy_.spike_factor > 0 && recent_losses_.size() >= kSpikeMinHistory) {
    const double mean =
        std::accumulate(recent_losses_.begin(), recent_losses_.end(), 0.0) / double(recent_losses_.size());
    if (loss > policy_.spike_factor * mean)
      fmt::print(
          "train step {:6d} | warning: loss spike: {:.4f} is {:.1f}x the mean {:.4f} of the previous {} logged "
          "losses (loss_spike_factor {})\n",
          step, loss, loss / mean, mean, recent_losses_.size(), policy_.spike_factor);
  }
  recent_losses_.push_back(loss);
  if (recent_losses_.size() > kSpikeWindow) recent_losses_.pop_front();
}

}  // namespace primer::recipes
