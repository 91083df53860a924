#include "recipes/layer_selection.h"

#include "core/check.h"
#include "core/io/atomic_file.h"
#include "layers/attention_mixer.h"

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

}  // namespace primer::recipes
