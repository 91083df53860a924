// Layer selection (the Priming paper's Algorithm 1): replace one attention layer at a time by sliding-window
// attention with the same weights, measure the degradation, and rank the layers. The least important become SSM
// layers (recipes/hybrid_patterns.h turns the scores into a pattern).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "layers/decoder_lm.h"

namespace primer::recipes {

struct LayerScore {
  int64_t layer = 0;
  double metric = 0;      // the evaluation with only this layer windowed (lower is better: held-out loss)
  double importance = 0;  // relative degradation (metric − baseline) / baseline
};

// `evaluate` measures the model as it is (e.g. mean held-out loss per token). Every attention layer of `model`
// is windowed in turn (its window restored afterwards); `progress` hears each layer's score as it lands.
std::vector<LayerScore> score_layers(layers::DecoderLM& model, int64_t window, const std::function<double()>& evaluate,
                                     double* baseline, const std::function<void(const LayerScore&)>& progress = {});

struct SelectLayersOptions {
  int64_t window = 2048;      // the SWA window each layer is tried with
  double ratio = 0.5;         // hybrid ratio of the printed patterns
  std::string mixer = "GKA";  // the SSM token of the printed patterns
  std::string out_csv;        // default: <output_dir>/layer_importance.csv
};

// `primer select-layers recipe.yaml`: the recipe's model (model_name_or_path) scored on its held-out data
// (dataset / tokenized_path, cutoff_len, per_device_train_batch_size, eval_batches, device; docs/recipes.md);
// writes the CSV and prints the selective and uniform patterns for the ratio. Returns a process exit code.
int run_select_layers(const std::string& recipe, const std::vector<std::string>& overrides,
                      const SelectLayersOptions& options);

// "layer,metric,delta,importance" rows in layer order (the input of hybrid_patterns' read_importance_csv),
// written atomically.
void write_importance_csv(const std::string& path, double baseline, const std::vector<LayerScore>& scores);

}  // namespace primer::recipes
