// The training loop over a TrainSetup: step (micro-batches → forward → backward → optimizer), log, evaluate,
// save — each its own method, in the order run() calls them.
#pragma once
#include <chrono>
#include <cstdint>
#include <fstream>

#include "core/eta.h"
#include "core/io/json.h"
#include "recipes/divergence.h"
#include "recipes/train_setup.h"

namespace primer::recipes {

class TrainLoop {
 public:
  explicit TrainLoop(TrainSetup& setup);
  // Trains from the setup's state to max_steps, evaluating before and after; returns the final held-out loss. A
  // SIGTERM or SIGINT (recipes/stop_request.h) ends it after the current step with a committed checkpoint: then
  // interrupted_by() is the signal and the returned loss is NaN.
  double run();
  int interrupted_by() const { return interrupted_by_; }

  // One optimizer step over gradient_accumulation_steps micro-batches.
  void step();
  // Held-out loss (and the objective's extra metrics), logged; returns the loss.
  double evaluate();
  // Commits a checkpoint of the current state; returns its directory.
  std::string save();

 private:
  using Clock = std::chrono::steady_clock;
  void log_window();
  // Divergence: whether every rank's step gradient is finite (one vote); the first parameter (model order, over the
  // ranks) whose gradient is not; PRIMER_FAULT's nan (recipes/fault_injection.h).
  bool gradients_finite_on_every_rank();
  std::string first_nonfinite_parameter();
  void inject_nan_gradient();
  // Tokens of one optimizer step over every data-parallel rank (padding included): the x of `primer plot --x tokens`.
  int64_t tokens_per_step() const;
  void write_metrics(const json::Value& record);

  TrainSetup& s_;
  std::ofstream metrics_;
  std::string metrics_path_;
  double flops_per_token_ = 0, peak_flops_ = 0;
  // The logging window: summed logged losses on the device (read at log points only), their count, and time.
  // step_loss_: the current step's, added to the window once its update is applied.
  Tensor loss_sum_, step_loss_;
  int64_t window_steps_ = 0, window_count_ = 0;
  Clock::time_point window_start_, run_start_;
  EtaEstimate step_times_;  // recent optimizer steps' durations: the ETA on the log line
  DivergenceGuard divergence_;
  int interrupted_by_ = 0;
};

// How the ranks of `host` share the held-out batches: the trainer's ranks each hold their slice of every batch (their
// DataShard); `primer eval`'s ranks each take whole batches in turn (rank r of n: batches r, r + n, ...).
enum class HeldoutSplit { RowsOfEveryBatch, WholeBatches };

struct HeldoutScore {
  double loss = 0;     // mean per target token
  int64_t tokens = 0;  // target tokens scored, over every rank
};

// The held-out loss over up to `batches` held-out batches (no gradients); with `host`, over every rank's share of them
// (`split`), losses and token counts summed over the ranks.
HeldoutScore heldout_score(layers::DecoderLM& model, const TrainData& source, int64_t batches, Device device,
                           parallel::Communicator* host = nullptr, HeldoutSplit split = HeldoutSplit::RowsOfEveryBatch);
inline double heldout_loss(layers::DecoderLM& model, const TrainData& source, int64_t batches, Device device,
                           parallel::Communicator* host = nullptr) {
  return heldout_score(model, source, batches, device, host).loss;
}

}  // namespace primer::recipes
