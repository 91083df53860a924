#include "recipes/layer_selection.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/eta.h"
#include "core/io/atomic_file.h"
#include "layers/attention_mixer.h"
#include "layers/hf_checkpoint.h"
#include "recipes/hybrid_patterns.h"
#include "recipes/train_schema.h"
#include "recipes/trainer.h"

namespace primer::recipes {

std::vector<LayerScore> score_layers(layers::DecoderLM& model, int64_t window, const std::function<double()>& evaluate,
                                     double* baseline, const std::function<void(const LayerScore&)>& progress) {
  PRIMER_CHECK(window > 0, "layer selection: window {} must be > 0", window);
  *baseline = evaluate();
  PRIMER_CHECK(*baseline > 0, "layer selection: the baseline evaluation is {}, expected a positive loss", *baseline);
  std::vector<LayerScore> scores;
  for (int64_t i = 0; i < model.config().num_hidden_layers; ++i) {
    auto* attention = dynamic_cast<layers::AttentionMixer*>(&model.mixer(size_t(i)));
    PRIMER_CHECK(attention, "layer selection: layer {} is a {} layer, expected attention", i,
                 mixer_token(model.config().mixer(i)));
    const int64_t kept = attention->window();
    attention->set_window(window);
    LayerScore s{i, evaluate(), 0};
    attention->set_window(kept);
    s.importance = (s.metric - *baseline) / *baseline;
    scores.push_back(s);
    if (progress) progress(s);
  }
  return scores;
}

void write_importance_csv(const std::string& path, double baseline, const std::vector<LayerScore>& scores) {
  std::string csv = "layer,metric,delta,importance\n";
  for (const LayerScore& s : scores)
    csv += fmt::format("{},{:.9g},{:.9g},{:.9g}\n", s.layer, s.metric, s.metric - baseline, s.importance);
  io::write_file_atomic(path, csv);
}

int run_select_layers(const std::string& recipe, const std::vector<std::string>& overrides,
                      const SelectLayersOptions& options) {
  const config::Config cfg = config::load_config(recipe, train_schema(), overrides);
  PRIMER_CHECK(cfg.has("model_name_or_path"), "{}: select-layers scores a trained model: set model_name_or_path",
               recipe);
  const int64_t B = cfg.get_int("per_device_train_batch_size"), T = cfg.get_int("cutoff_len");
  // A window covering the whole row windows nothing: every layer would score 0.
  PRIMER_CHECK(
      options.window < T,
      "select-layers: --window {} is not shorter than cutoff_len {} ({}): no layer would change and every score "
      "would be 0; pass a --window below {} or raise cutoff_len",
      options.window, T, cfg.where("cutoff_len"), T);
  const Device device = pick_device(cfg.get_string("device"));
  if (device.is_cuda()) cuda::set_device(device.index);
  const ModelConfig config = model_config_from(cfg);
  PRIMER_CHECK(config.layer_types.empty(), "{}: select-layers scores a Transformer; this model is the hybrid '{}'",
               recipe, format_hybrid_pattern(config.layer_types));
  const MixerKind ssm = parse_mixer_token(options.mixer, "--mixer");
  const std::unique_ptr<TrainData> data = make_train_data(cfg, B, T);

  ParameterRegistry params;
  layers::DecoderLM model(config, params);
  params.materialize(device, device.is_cuda() && cfg.get_bool("bf16") ? DType::BF16 : DType::F32, 0);
  layers::load_hf_weights(cfg.get_string("model_name_or_path"), params);
  const int64_t batches = cfg.get_int("eval_batches");
  fmt::print("select-layers: {} layers of {}, each windowed to {} tokens alone; {} held-out batches of {} x {} ({})\n",
             config.num_hidden_layers, cfg.get_string("model_name_or_path"), options.window, batches, B, T,
             data->describe());

  double baseline = 0;
  EtaEstimate layer_times;
  auto last = std::chrono::steady_clock::now();
  const std::vector<LayerScore> scores = score_layers(
      model, options.window, [&] { return heldout_loss(model, *data, batches, device); }, &baseline,
      [&](const LayerScore& s) {
        const auto now = std::chrono::steady_clock::now();
        layer_times.add(std::chrono::duration<double>(now - last).count());
        last = now;
        fmt::print("select-layers: layer {:3d} | held-out loss {:.5f} | importance {:+.3e} | ETA {}\n", s.layer,
                   s.metric, s.importance,
                   format_duration(layer_times.remaining(double(config.num_hidden_layers - s.layer - 1))));
      });
  const std::string csv =
      options.out_csv.empty() ? cfg.get_string("output_dir") + "/layer_importance.csv" : options.out_csv;
  std::filesystem::create_directories(std::filesystem::path(csv).parent_path().empty()
                                          ? std::filesystem::path(".")
                                          : std::filesystem::path(csv).parent_path());
  write_importance_csv(csv, baseline, scores);
  std::vector<double> importance;
  for (const LayerScore& s : scores) importance.push_back(s.importance);
  fmt::print("select-layers: baseline held-out loss {:.5f} (perplexity {:.3f}); scores in {}\n", baseline,
             std::exp(baseline), csv);
  fmt::print("select-layers: selective pattern at ratio {}: {}\n", options.ratio,
             format_hybrid_pattern(selective_pattern(importance, options.ratio, ssm)));
  fmt::print("select-layers: uniform pattern at ratio {}:   {}\n", options.ratio,
             format_hybrid_pattern(uniform_pattern(config.num_hidden_layers, options.ratio, ssm)));
  return 0;
}

}  // namespace primer::recipes
