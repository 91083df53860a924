#include "recipes/hf_transfer.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "layers/decoder_lm.h"
#include "layers/hf_checkpoint.h"
#include "optim/adamw.h"
#include "recipes/checkpoint.h"
#include "core/config/config.h"
#include "recipes/model_files.h"
#include "recipes/train_schema.h"
#include "recipes/trainer.h"

namespace primer::recipes {

DType parse_weights_dtype(const std::string& name, const std::string& option) {
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "fp16" || name == "float16") return DType::F16;
  if (name == "fp32" || name == "float32") return DType::F32;
  PRIMER_FAIL("{} '{}': expected bf16, fp16 or fp32", option, name);
}

int run_export(const std::string& recipe, const std::vector<std::string>& overrides, const std::string& checkpoint,
               const std::string& out_dir, DType dtype) {
  const config::Config cfg = config::load_config(recipe, train_schema(), overrides);
  const CheckpointManager checkpoints(cfg.get_string("output_dir"), 0);
  const std::optional<std::string> dir =
      checkpoints.resolve(checkpoint == "latest" ? "auto" : checkpoint, "export --checkpoint");
  PRIMER_CHECK(dir, "export: {} has no complete checkpoint yet (output_dir {})", recipe, cfg.get_string("output_dir"));
  ModelConfig config = model_config_from(cfg);
  config.torch_dtype = dtype;
  ParameterRegistry params;
  layers::DecoderLM model(config, params);
  params.materialize(Device::cpu(), DType::F32, 0);
  optim::AdamW optimizer(params, {});  // the checkpoint's moments land here and are dropped
  const TrainingState state = checkpoints.load(*dir, params, optimizer);
  layers::export_hf(out_dir, config, params, dtype);
  if (cfg.has("model_name_or_path")) copy_model_files(cfg.get_string("model_name_or_path"), out_dir, false);
  fmt::print("export: {} (step {}) → {} ({}, {}, {:.2f}M parameters)\n", *dir, state.step, out_dir,
             config.layer_types.empty() ? config.model_type
                                        : format_hybrid_pattern(HybridPattern{config.layer_types, config.fused}),
             dtype_name(dtype), double(params.count()) / 1e6);
  return 0;
}

int run_import(const std::string& in_dir, const std::string& out_dir, DType dtype) {
  check_model_dir(in_dir, "import");
  ModelConfig config = load_hf_config(in_dir + "/config.json");
  config.torch_dtype = dtype;
  ParameterRegistry params;
  layers::DecoderLM model(config, params);
  params.materialize(Device::cpu(), DType::F32, 0);
  layers::load_hf_weights(in_dir, params);  // every tensor present and well-shaped, or an error naming each
  // A NaN or inf weight makes every loss NaN from the first step: refuse it here, where the tensor can be named.
  for (Parameter* p : params.all()) {
    const std::vector<float> values = p->master.to_vector<float>();
    const auto bad = std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
    PRIMER_CHECK(bad == values.end(),
                 "import: {}: tensor '{}' holds {} NaN or inf values (the first at element {}); a model with them "
                 "cannot train or generate",
                 in_dir, p->name, std::count_if(bad, values.end(), [](float v) { return !std::isfinite(v); }),
                 bad - values.begin());
  }
  layers::export_hf(out_dir, config, params, dtype);
  const int files = copy_model_files(in_dir, out_dir, false);
  std::string mixers;
  for (int64_t i = 0; i < config.num_hidden_layers; ++i)
    mixers += std::string(i ? "-" : "") + (config.layer_types.empty() ? "*" : mixer_token(config.mixer(i)));
  fmt::print("import: {} → {}: {} {}{}, {} layers ({}), {:.2f}M parameters, {} tokenizer files, {}\n", in_dir, out_dir,
             config.layer_types.empty() ? "" : "hybrid", config.model_type, config.fused ? " (fused Stage 0/1)" : "",
             config.num_hidden_layers, mixers, double(params.count()) / 1e6, files, dtype_name(dtype));
  return 0;
}

}  // namespace primer::recipes
