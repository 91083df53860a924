// `primer train run.yaml`: one loop for every stage that trains on next-token cross-entropy — data → forward →
// loss → backward (gradient accumulation) → clip → AdamW step → log → evaluate → checkpoint — driven by a
// validated recipe (recipes/train_schema.h), resumable bit-exactly from its checkpoints.
#pragma once
#include <string>
#include <vector>

#include "core/device.h"
#include "layers/decoder_lm.h"
#include "core/config/config.h"
#include "recipes/train_data.h"

namespace primer::recipes {

// Loads and validates `recipe` with `--set key=value` overrides and trains. Returns a process exit code.
int run_train(const std::string& recipe, const std::vector<std::string>& overrides);

// "cpu", "cuda" (errors when no GPU is usable) or "auto" (CUDA when usable).
Device pick_device(const std::string& name);

// The recipe's model: model_name_or_path's config.json or the inline model_config, with config_overrides_json.
ModelConfig model_config_from(const config::Config& cfg);

// Mean held-out loss per target token over up to `batches` held-out batches (no gradients).
double heldout_loss(layers::DecoderLM& model, const TrainData& source, int64_t batches, Device device);

// Dense bf16 peak of the current GPU for MFU (H100/H200 SXM 989 TFLOP/s, A100 312); 0 when unknown.
double peak_bf16_flops();

}  // namespace primer::recipes
