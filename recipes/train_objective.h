// What a training run minimises, chosen once at setup so the loop has no stage `if`s: next-token cross-entropy
// (pt, sft: the gradient of the mean loss over the step's target tokens) or Stage 1's distillation MSE of a fused
// teacher-student model (hkd: the mean of the micro-steps' MSEs, as the reference divides by the accumulation).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/autograd/variable.h"
#include "data/loader.h"
#include "layers/decoder_lm.h"
#include "recipes/train_data.h"

namespace primer::recipes {

class Objective {
 public:
  virtual ~Objective() = default;
  // One micro-batch: `objective` is scaled so that backpropagating it adds this micro-batch's share of the step's
  // gradient; `logged` (f32 [1] on the device) is what the logged loss sums. `step_targets` counts the target
  // tokens of the whole step (every micro-batch of every data-parallel rank), `micro_batches` its micro-batches
  // over every data-parallel rank.
  struct MicroBatchLoss {
    ag::Var objective;
    Tensor logged;
  };
  virtual MicroBatchLoss micro_batch_loss(layers::DecoderLM& model, const data::Batch& batch, Device device,
                                          int64_t step_targets, int64_t micro_batches) = 0;
  // What the logged sum is divided by over a logging window of one step: target tokens or micro-batches.
  virtual int64_t logged_count(int64_t step_targets, int64_t micro_batches) const = 0;
  // Extra held-out metrics besides loss and perplexity (Stage 1: the distillation MSE), summed over
  // `batches` held-out batches: {name, sum, count}; empty name when there are none.
  struct Extra {
    std::string name;
    Tensor sum;  // f32 [1] on the device
    int64_t count = 0;
  };
  virtual Extra evaluate_extra(layers::DecoderLM& model, const TrainData& source, int64_t batches, Device device) = 0;
};

std::unique_ptr<Objective> make_cross_entropy_objective();
std::unique_ptr<Objective> make_distillation_objective(layers::DistillOptions options);

Tensor ids_of(const data::Batch& b, Device device);
Tensor targets_of(const data::Batch& b, Device device);
Tensor positions_of(const data::Batch& b, Device device);  // undefined when the batch carries none
int64_t count_targets(const data::Batch& b);

}  // namespace primer::recipes
