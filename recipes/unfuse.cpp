#include "recipes/unfuse.h"

#include "core/check.h"
#include "layers/decoder_lm.h"
#include "layers/hf_checkpoint.h"
#include "recipes/model_files.h"

namespace primer::recipes {

int run_unfuse(std::string fused_dir, std::string out_dir) {
  while (fused_dir.size() > 1 && fused_dir.back() == '/') fused_dir.pop_back();
  if (out_dir.empty()) out_dir = fused_dir + "_unfused";
  check_model_dir(fused_dir, "unfuse");
  const ModelConfig fused = load_hf_config(fused_dir + "/config.json");
  PRIMER_CHECK(fused.fused, "{}/config.json is not a fused teacher-student checkpoint (pattern '{}')", fused_dir,
               format_hybrid_pattern(fused.layer_types));
  ParameterRegistry fused_params;
  layers::DecoderLM fused_model(fused, fused_params);
  fused_params.materialize(Device::cpu(), DType::F32, 0);
  layers::load_hf_weights(fused_dir, fused_params);

  ModelConfig hybrid = fused;
  hybrid.fused = false;
  ParameterRegistry params;
  layers::DecoderLM model(hybrid, params);
  params.materialize(Device::cpu(), DType::F32, 0);
  for (Parameter* p : params.all()) p->master.copy_from(fused_params.get(p->name).master);
  layers::export_hf(out_dir, hybrid, params, fused.torch_dtype);
  copy_model_files(fused_dir, out_dir, false);  // the tokenizer: not the trainer's logs and configs
  fmt::print("unfuse: {} ({}) → {} ({}): dropped {} teacher parameters\n", fused_dir,
             format_hybrid_pattern(HybridPattern{fused.layer_types, true}), out_dir,
             format_hybrid_pattern(hybrid.layer_types), fused_params.count() - params.count());
  return 0;
}

}  // namespace primer::recipes
