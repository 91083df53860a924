// AdamW with fp32 master weights and moments, decoupled weight decay, bias correction and gradient clipping
// by the global norm. One fused pass per parameter updates master, m, v and writes the bf16 compute copy;
// the clipping factor is computed on the device from the squared-norm sum, so a step never syncs the host.
#pragma once
#include <functional>

#include "core/parameters.h"

namespace primer::optim {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;   // applied to parameters whose weight_decay flag is set
  double max_grad_norm = 1.0;  // <= 0 disables clipping
};

class AdamW {
 public:
  AdamW(ParameterRegistry& params, AdamWConfig config);
  // Computes the global gradient norm of the current gradients (over every shard, see set_grad_norm_reduction) and
  // reads it on the host (one scalar sync): whether it is finite. A caller that refuses non-finite updates asks
  // before step(), which then reuses the norm.
  bool gradient_norm_finite();
  // One update of every trainable parameter with learning rate `lr`; increments the step counter.
  void step(double lr);
  // The global gradient norm (before clipping) of the last step: f32 [1] on the parameters' device.
  const Tensor& grad_norm_squared() const { return grad_sumsq_; }
  double grad_norm() const;  // reads the device scalar (host sync): call only when logging
  int64_t steps() const { return steps_; }

  // Optimizer state by parameter name, for checkpoints. A parameter has state from its first step on.
  Tensor& first_moment(const std::string& name);
  Tensor& second_moment(const std::string& name);
  bool has_state(const std::string& name) const { return m_.count(name) != 0; }
  const Tensor& first_moment(const std::string& name) const;
  const Tensor& second_moment(const std::string& name) const;
  // Gives every trainable parameter without state zero moments (what its first step would start from), so that
  // checkpoints can address the moments before the first step.
  void init_state();
  // Restores a parameter's moments (f32, its shape, on its device), e.g. from a checkpoint.
  void set_state(const std::string& name, Tensor m, Tensor v);
  void set_steps(int64_t s) { steps_ = s; }
  // Sharded parameters: `reduce` sums the squared gradient norm (f32 [1] on the device, in place) over the ranks
  // that hold the other shards before clipping, so clipping and the non-finite check see the global norm.
  void set_grad_norm_reduction(std::function<void(const Tensor&)> reduce) { reduce_grad_norm_ = std::move(reduce); }

 private:
  ParameterRegistry& params_;
  AdamWConfig config_;
  std::function<void(const Tensor&)> reduce_grad_norm_;
  int64_t steps_ = 0;
  std::map<std::string, Tensor> m_, v_;
  Tensor grad_sumsq_;
  bool norm_current_ = false;  // grad_sumsq_ holds the current gradients' norm (gradient_norm_finite ran)

  void compute_grad_norm();
};

}  // namespace primer::optim
