// `primer train run.yaml`: one loop for every stage — pre-training and SFT on next-token cross-entropy, Stage 1
// on the distillation MSE of a fused teacher-student model — driven by a validated recipe (recipes/train_schema.h),
// resumable bit-exactly from its checkpoints. Setup (recipes/train_setup.h) builds the run, the loop
// (recipes/train_loop.h) runs it, this file ties them to the command.
#pragma once
#include <string>
#include <vector>

#include "recipes/train_loop.h"
#include "recipes/train_setup.h"

namespace primer::recipes {

// Loads and validates `recipe` with `--set key=value` overrides and trains on every rank of the job (one process,
// or each rank of an mpirun/srun launch). Returns a process exit code: 0, or 128 + signal when interrupted.
int run_train(const std::string& recipe, const std::vector<std::string>& overrides);

// What a run ended with: the final held-out loss, or (interrupted by SIGTERM/SIGINT after committing a checkpoint)
// the signal.
struct TrainResult {
  double final_loss = 0;
  int interrupted_by = 0;
};

// Trains a loaded recipe on `ranks` (collective): writes resolved_config.yaml, trains, exports when the recipe asks.
TrainResult train(const config::Config& cfg, const std::string& recipe, RunRanks ranks);

}  // namespace primer::recipes
