// A trained model loaded for use (`primer generate`, `primer eval`) from what training and export leave behind: a run
// directory (its newest intact checkpoint), one training checkpoint (the model comes from the recipe stored in it),
// or a Hugging Face directory (config.json + safetensors: a Transformer or primer's hybrid format). Also finds the
// model's tokenizer, or says that the model reads bytes.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/device.h"
#include "core/parameters.h"
#include "layers/decoder_lm.h"
#include "layers/model_config.h"

namespace primer::recipes {

struct InferenceModel {
  std::string source;  // what was loaded: the checkpoint or Hugging Face directory
  ModelConfig config;
  std::unique_ptr<ParameterRegistry> params;
  std::unique_ptr<layers::DecoderLM> model;
  // The recipe that trained a checkpoint, as stored in it (empty for a Hugging Face directory): its data and
  // held-out split.
  std::string recipe_yaml;
  // The directory holding tokenizer.json: the Hugging Face directory, or a checkpoint's model_name_or_path;
  // empty when there is none (then the model must read bytes: a vocabulary of 256).
  std::string tokenizer_dir;
};

// Loads `path` (see above) onto `device` with compute copies in `compute`, which are all it keeps: f32 masters are
// released where the compute copy is another tensor (bf16: an 8B model holds 16 GB instead of 48). Errors name the
// path and what was expected there.
InferenceModel load_inference_model(const std::string& path, Device device, DType compute);

// A train recipe from YAML text (a checkpoint's stored recipe, or one written for its data keys) with `--set`-style
// overrides, validated like a recipe file; errors name `where`.
config::Config recipe_from_yaml(const std::string& yaml, const std::string& where,
                                const std::vector<std::string>& overrides = {});

}  // namespace primer::recipes
