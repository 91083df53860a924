#include "recipes/soup.h"

#include <cmath>
#include <filesystem>
#include <numeric>

#include "core/check.h"
#include "core/ops/elementwise.h"
#include "layers/decoder_lm.h"
#include "layers/hf_checkpoint.h"
#include "recipes/model_files.h"

namespace primer::recipes {

int run_soup(const std::vector<std::string>& inputs, std::vector<double> weights, const std::string& out_dir) {
  PRIMER_CHECK(!inputs.empty(), "soup: no checkpoints given");
  if (weights.empty()) weights.assign(inputs.size(), 1.0 / double(inputs.size()));
  PRIMER_CHECK(weights.size() == inputs.size(), "soup: {} weights for {} checkpoints", weights.size(), inputs.size());
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  PRIMER_CHECK(std::abs(total - 1.0) < 1e-6, "soup: the weights sum to {}, expected 1", total);
  // Writing over an input would replace the weights the average is still reading (whatever spelling names it).
  const std::filesystem::path out = std::filesystem::weakly_canonical(out_dir);
  for (const std::string& input : inputs)
    PRIMER_CHECK(std::filesystem::weakly_canonical(input) != out,
                 "soup: --out '{}' is the input checkpoint '{}'; write the average to another directory", out_dir,
                 input);

  for (const std::string& input : inputs) check_model_dir(input, "soup");
  const ModelConfig config = load_hf_config(inputs[0] + "/config.json");
  ParameterRegistry sum;
  layers::DecoderLM model(config, sum);
  sum.materialize(Device::cpu(), DType::F32, 0);
  for (Parameter* p : sum.all()) p->master.zero_();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ModelConfig c = load_hf_config(inputs[i] + "/config.json");
    c.torch_dtype = config.torch_dtype;  // only the weights' storage may differ
    PRIMER_CHECK(c == config, "soup: {}/config.json describes another model than {}/config.json", inputs[i], inputs[0]);
    ParameterRegistry one;
    layers::DecoderLM same(c, one);
    one.materialize(Device::cpu(), DType::F32, 0);
    layers::load_hf_weights(inputs[i], one);
    for (Parameter* p : sum.all()) ops::add_(p->master, one.get(p->name).master, weights[i]);
    fmt::print("soup: + {} × {}\n", weights[i], inputs[i]);
  }
  layers::export_hf(out_dir, config, sum, config.torch_dtype);
  copy_model_files(inputs[0], out_dir, false);
  fmt::print("soup: wrote the average of {} checkpoints ({} parameters) to {}\n", inputs.size(), sum.count(), out_dir);
  return 0;
}

}  // namespace primer::recipes
