// Trains a small decoder LM whose every block is one mixer on a synthetic task's sets (tools/synthetic/labelled_set.h)
// with the schedule of the Kaczmarz linear attention paper's MQAR runs (constant learning rate, early stopping on
// validation accuracy, best weights kept), then measures the best weights' accuracy on each evaluation set.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "layers/hybrid_config.h"
#include "layers/model_config.h"
#include "tools/synthetic/labelled_set.h"

namespace primer::synthetic {

// The model: `layers` blocks of one mixer (no attention), `heads` heads of `head_dim` (a state of heads·head_dim²
// per layer for GDN, KZLA, M2 and KLA), SwiGLU `ffn`, the head tied to the embedding unless not tie_embeddings.
struct SyntheticModel {
  int64_t layers = 2, width = 256, heads = 4, head_dim = 64, ffn = 1024;
  bool tie_embeddings = true;  // the LM head as the embedding's transpose, as the authors' models tie them
};

struct SyntheticTraining {
  int64_t batch = 32;
  double lr = 1e-3, weight_decay = 0.1, max_grad_norm = 1.0;
  int64_t max_steps = 10000, eval_every = 200, patience = 10;  // patience: evaluations without improvement
  uint64_t seed = 42;                                          // initialisation and the epochs' order
};

// Errors name the option (as its command-line flag) and what was expected.
void validate(const SyntheticModel& model, const SyntheticTraining& training);

// A mixer of --mixers: a pattern token, or KDA (Kimi Delta Attention: GDN2 with gdn2.kda_gates, one gate per head).
struct SyntheticMixer {
  MixerKind kind;
  bool kda_gates = false;
  std::string name() const;  // the token, or "KDA"
};

ModelConfig synthetic_model_config(const SyntheticMixer& mixer, const SyntheticModel& model, int64_t vocab,
                                   int64_t max_seq);

struct SyntheticResult {
  std::string mixer;
  int64_t layers = 0, params = 0, steps = 0, best_step = 0;
  double best_val = 0, train_seconds = 0;  // train_seconds includes the validation passes
  std::vector<double> accuracy;            // per evaluation set, with the best weights
};

// "GDN,KZLA,M2,KDA" → those mixers; errors name --mixers.
std::vector<SyntheticMixer> parse_mixer_list(const std::string& list);

// The results as a markdown table: a row per model, its accuracy with the best weights on each evaluation set (at
// seq × factor); `by_depth` adds the models' blocks and whether each solves the task (≥ 90% at seq).
void print_results(int64_t seq, const std::vector<int64_t>& factors, const std::vector<SyntheticResult>& results,
                   bool by_depth);

// Trains and evaluates on `device` (bf16 compute on CUDA, f32 on the CPU), printing a progress line per evaluation.
SyntheticResult train_synthetic(const SyntheticMixer& mixer, const SyntheticModel& model,
                                const SyntheticTraining& training, const SyntheticData& data, Device device);

}  // namespace primer::synthetic
