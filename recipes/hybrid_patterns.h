// Which layers of a Transformer become SSM layers: the uniform pattern of a hybrid ratio, and the selective one
// from per-layer importance scores (`primer select-layers`, the Priming paper's Algorithm 1).
#pragma once
#include <string>
#include <vector>

#include "layers/hybrid_config.h"

namespace primer::recipes {

// round(ratio·L) layers become `ssm`, the attention layers evenly spaced from layer 0 (ratio 0.5: "*-X-*-X…").
std::vector<MixerKind> uniform_pattern(int64_t layers, double ratio, MixerKind ssm);

// The round(ratio·L) layers of lowest importance become `ssm` (ties: lower index first).
std::vector<MixerKind> selective_pattern(const std::vector<double>& importance, double ratio, MixerKind ssm);

// Reads the importance column of a select-layers CSV (header "layer,...,importance", one row per layer in
// order). Errors name the file and line.
std::vector<double> read_importance_csv(const std::string& path);

}  // namespace primer::recipes
