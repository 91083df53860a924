// What a run does when training diverges: a step whose gradient holds NaN or inf stops the run or, under
// `nan_policy: skip`, is skipped up to `nan_skip_limit` times; a logged loss far above its recent mean is warned
// about (`loss_spike_factor`). The train loop detects; this decides and words it.
#pragma once
#include <cstdint>
#include <deque>
#include <string>

#include "core/config/config.h"

namespace primer::recipes {

struct DivergencePolicy {
  bool skip = false;        // nan_policy: skip
  int64_t skip_limit = 0;   // nan_skip_limit
  double spike_factor = 0;  // loss_spike_factor; 0: no warning
};
DivergencePolicy divergence_policy(const config::Config& cfg);

class DivergenceGuard {
 public:
  // skipped: steps a resumed run had skipped already (its checkpoint's count), which the limit counts too.
  explicit DivergenceGuard(DivergencePolicy policy, int64_t skipped = 0) : policy_(policy), skipped_(skipped) {}

  // Step `step` has a non-finite gradient (every rank agrees), first in `parameter` (model order; empty when only
  // the squared norm overflowed); `loss` is the step's mean logged loss. Under skip within the limit: prints that the
  // update is skipped and returns. Otherwise throws a primer::Error naming the step, the parameter and its layer.
  void nonfinite_gradient(int64_t step, const std::string& parameter, double loss);
  int64_t skipped() const { return skipped_; }

  // A logged training loss: warns when it exceeds loss_spike_factor × the mean of the previous logged losses (the
  // last kSpikeWindow of them, once kSpikeMinHistory are in), then joins them.
  void logged_loss(int64_t step, double loss);

  static constexpr size_t kSpikeWindow = 20, kSpikeMinHistory = 5;

 private:
  DivergencePolicy policy_;
  int64_t skipped_ = 0;
  std::deque<double> recent_losses_;
};

// "model.layers.3.mlp.up_proj.weight" → " (layer 3)"; "" for parameters outside the decoder layers.
std::string layer_of(const std::string& parameter);

}  // namespace primer::recipes
