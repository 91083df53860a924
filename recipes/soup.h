// `primer soup`: parameter averaging ("model soup") of Hugging Face checkpoints of one architecture, e.g. the
// last checkpoints of a run or runs from one Stage 1 model.
#pragma once
#include <string>
#include <vector>

namespace primer::recipes {

// Writes Σ w_i · θ_i (weights default to uniform and must sum to 1 within 1e-6) of the `inputs` directories,
// whose config.json must describe the same model, to `out_dir` in the first input's dtype with its tokenizer
// files. Returns a process exit code.
int run_soup(const std::vector<std::string>& inputs, std::vector<double> weights, const std::string& out_dir);

}  // namespace primer::recipes
