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
#include "recipes/checkpoint.h"
#include "recipes/train_data.h"
#include "recipes/train_objective.h"

namespace primer::recipes {

struct TrainSetup {
  config::Config cfg;
  std::string recipe, out_dir;
  Device device = Device::cpu();
  DType compute = DType::F32;
  uint64_t seed = 0;
  ModelConfig model_config;
  int64_t batch = 0, seq = 0, accumulation = 1, max_steps = 0;

  std::unique_ptr<TrainData> data;
  std::unique_ptr<ParameterRegistry> params;
  std::unique_ptr<layers::DecoderLM> model;
  std::unique_ptr<optim::AdamW> optimizer;
  optim::Schedule schedule;
  std::unique_ptr<Objective> objective;
  std::unique_ptr<CheckpointManager> checkpoints;
  TrainingState state;  // step 0, or where the resumed checkpoint stood
};

// Builds the run of a loaded recipe (`recipe` names it in the log) and resumes from its checkpoint if asked.
TrainSetup setup_training(const config::Config& cfg, const std::string& recipe);

// "cpu", "cuda" (errors when no GPU is usable) or "auto" (CUDA when usable).
Device pick_device(const std::string& name);

// The recipe's model: model_name_or_path's config.json or the inline model_config, with config_overrides_json.
ModelConfig model_config_from(const config::Config& cfg);

// "qwen3", or "hybrid qwen3 *-GKA-*-GKA" (fused tokens for a Stage 0/1 model), for the log.
std::string model_name(const ModelConfig& c);

}  // namespace primer::recipes
