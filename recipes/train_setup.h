// Everything a training run needs, built from a validated recipe in one place: device, model config, data,
// model and parameters, optimizer and schedule, objective, checkpoints and the resume point. The loop
// (recipes/train_loop.h) only runs it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/config/config.h"
#include "core/device.h"
#include "core/parameters.h"
#include "layers/decoder_lm.h"
#include "layers/model_config.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/process_grid.h"
#include "parallel/fsdp/fsdp.h"
#include "parallel/sp/sequence_parallel.h"
#include "recipes/checkpoint.h"
#include "recipes/train_data.h"
#include "recipes/train_objective.h"

namespace primer::recipes {

// The ranks a run trains on: `tensors` carries tensors on the training device (NCCL, MPI or the single process),
// `host` host values and checkpoint coordination; both span the same ranks in the same order.
struct RunRanks {
  parallel::Communicator* tensors = nullptr;
  parallel::Communicator* host = nullptr;
};

struct TrainSetup {
  config::Config cfg;
  std::string recipe, out_dir;
  Device device = Device::cpu();
  DType compute = DType::F32;
  uint64_t seed = 0;
  ModelConfig model_config;
  int64_t batch = 0, seq = 0, accumulation = 1, max_steps = 0;

  RunRanks ranks;
  // Sequence parallelism (sequence_parallel_size > 1): the dp × sp grid and the exchange the model's mixers use.
  parallel::SequenceParallelOptions sp_options;
  std::unique_ptr<parallel::ProcessGrid> grid;
  std::unique_ptr<parallel::SequenceParallel> sequence;
  DataShard shard;  // this rank's rows and part of each row
  parallel::ZeroStage zero_stage = parallel::ZeroStage::Replicated;
  std::unique_ptr<TrainData> data;  // this rank's slice of every global batch
  std::unique_ptr<ParameterRegistry> params;
  std::unique_ptr<layers::DecoderLM> model;
  std::unique_ptr<parallel::Fsdp> fsdp;     // the parameters' layout over the ranks; the model's unit hooks
  std::unique_ptr<optim::AdamW> optimizer;  // over fsdp->shards()
  optim::Schedule schedule;
  std::unique_ptr<Objective> objective;
  std::unique_ptr<CheckpointManager> checkpoints;
  TrainingState state;  // step 0, or where the resumed checkpoint stood
};

// Builds the run of a loaded recipe (`recipe` names it in the log) on `ranks` and resumes from its checkpoint if
// asked. Collective over the ranks.
TrainSetup setup_training(const config::Config& cfg, const std::string& recipe, RunRanks ranks);

// The recipe's ZeRO stage: zero_stage, else the deepspeed JSON's zero_optimization.stage, else 0.
parallel::ZeroStage zero_stage_of(const config::Config& cfg);

// What a checkpoint of this run holds on this rank.
CheckpointContent checkpoint_content(TrainSetup& s);
// The same for any model laid out by `fsdp` (registry `params`) and trained by `optimizer` (over fsdp.shards()).
CheckpointContent sharded_content(ParameterRegistry& params, parallel::Fsdp& fsdp, optim::AdamW& optimizer);

// "cpu", "cuda" (the current GPU; errors when none is usable) or "auto" (CUDA when usable).
Device pick_device(const std::string& name);

// The recipe's model: model_name_or_path's config.json or the inline model_config, with config_overrides_json.
ModelConfig model_config_from(const config::Config& cfg);

// "qwen3", or "hybrid qwen3 *-GKA-*-GKA" (fused tokens for a Stage 0/1 model), for the log.
std::string model_name(const ModelConfig& c);

}  // namespace primer::recipes
