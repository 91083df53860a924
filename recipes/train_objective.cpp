#include "recipes/train_objective.h"

#include <algorithm>

#include "core/autograd/functions.h"
#include "core/ops/elementwise.h"

namespace primer::recipes {

Tensor ids_of(const data::Batch& b, Device device) {
  return Tensor::from_vector(b.ids, {b.rows, b.seq}, DType::I32, device);
}
Tensor targets_of(const data::Batch& b, Device device) {
  return Tensor::from_vector(b.targets, {b.rows, b.seq}, DType::I32, device);
}
Tensor positions_of(const data::Batch& b, Device device) {
  return b.positions.empty() ? Tensor() : Tensor::from_vector(b.positions, {b.rows, b.seq}, DType::I32, device);
}
int64_t count_targets(const data::Batch& b) {
  return std::count_if(b.targets.begin(), b.targets.end(), [](int32_t t) { return t >= 0; });
}

namespace {

class CrossEntropy final : public Objective {
 public:
  MicroBatchLoss micro_batch_loss(layers::DecoderLM& model, const data::Batch& b, Device device, int64_t step_targets,
                                  int64_t) override {
    const ag::Var loss = model.loss(ids_of(b, device), targets_of(b, device),
                                    1.0 / double(std::max<int64_t>(step_targets, 1)), positions_of(b, device));
    return {loss, loss->value.to(DType::F32)};
  }
  int64_t logged_count(int64_t step_targets, int64_t) const override { return step_targets; }
  Extra evaluate_extra(layers::DecoderLM&, const TrainData&, int64_t, Device) override { return {}; }
};

class Distillation final : public Objective {
 public:
  explicit Distillation(layers::DistillOptions options) : options_(options) {}
  MicroBatchLoss micro_batch_loss(layers::DecoderLM& model, const data::Batch& b, Device device, int64_t,
                                  int64_t micro_batches) override {
    const ag::Var mse = model.distill_loss(ids_of(b, device), options_, positions_of(b, device));
    return {ag::scale(mse, 1.0 / double(micro_batches)), mse->value.to(DType::F32)};
  }
  int64_t logged_count(int64_t, int64_t micro_batches) const override { return micro_batches; }
  Extra evaluate_extra(layers::DecoderLM& model, const TrainData& source, int64_t batches, Device device) override {
    ag::NoGrad no_grad;
    data::Batch batch;
    Extra e{"distill_mse", Tensor::zeros({1}, DType::F32, device), std::min(batches, source.heldout_batches())};
    for (int64_t i = 0; i < e.count; ++i) {
      source.heldout_batch(i, batch);
      ops::add_(e.sum,
                model.distill_loss(ids_of(batch, device), options_, positions_of(batch, device))->value.to(DType::F32));
    }
    return e;
  }

 private:
  layers::DistillOptions options_;
};

}  // namespace

std::unique_ptr<Objective> make_cross_entropy_objective() { return std::make_unique<CrossEntropy>(); }
std::unique_ptr<Objective> make_distillation_objective(layers::DistillOptions options) {
  return std::make_unique<Distillation>(options);
}

}  // namespace primer::recipes
