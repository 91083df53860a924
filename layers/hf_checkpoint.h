// Hugging Face checkpoints in and out: a config.json + safetensors directory (single file or sharded)
// loaded into a ParameterRegistry whose names are the Hugging Face names, and written back the same way.
#pragma once
#include <string>
#include <vector>

#include "core/parameters.h"
#include "layers/model_config.h"

namespace primer::layers {

// Loads every registered parameter's master from `dir` (converting dtypes) and refreshes compute copies.
// Tensors the registry expects but the checkpoint lacks, and mis-shaped ones, are errors naming each of them
// and the directory; a missing lm_head.weight is fine when the config ties embeddings. Tensors the checkpoint
// has beyond the registry are reported in one line (e.g. rotary caches of older exports).
void load_hf_weights(const std::string& dir, ParameterRegistry& params);

// As load_hf_weights, but parameters the checkpoint lacks keep their values and are returned (Stage 0 copies a
// Transformer's weights into a hybrid whose new mixers it initialises). Mis-shaped tensors are still errors.
std::vector<std::string> load_hf_weights_present(const std::string& dir, ParameterRegistry& params);

// The values of load_hf_weights, one parameter at a time (each read from the files as it is asked for, f32 on the
// host), for a registry that is only declared (FSDP's sharded start-up); the checkpoint is checked against the
// registry at once, with load_hf_weights' errors.
ParameterValues hf_weight_values(const std::string& dir, ParameterRegistry& params);

// Writes config.json and model.safetensors (or shards of at most max_shard_bytes) with every parameter's exact
// value (its master, or where that was released its compute copy) converted to `dtype`, atomically per file.
void export_hf(const std::string& dir, const ModelConfig& config, ParameterRegistry& params, DType dtype,
               uint64_t max_shard_bytes = uint64_t(5) << 30);

}  // namespace primer::layers
