// Trains a small decoder LM whose every block is one mixer on MQAR (tools/synthetic/mqar_task.h) with the Kaczmarz
// linear attention paper's schedule (constant learning rate, early stopping on validation accuracy, best weights
// kept), then measures the best weights' accuracy on sets `factors` times longer than training.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "layers/hybrid_config.h"
#include "layers/model_config.h"
#include "tools/synthetic/mqar_task.h"

namespace primer::synthetic {

struct MqarRunOptions {
  MqarSpec task;  // task.seq is the training length
  int64_t layers = 2, width = 256, heads = 4, head_dim = 64, ffn = 1024;
  int64_t train_size = 20000, val_size = 2000;  // val_size is also each extrapolation set's size
  std::vector<int64_t> factors = {1, 2, 4, 8};  // extrapolation lengths: task.seq * factor
  int64_t batch = 32;
  bool tie_embeddings = true;  // the LM head as the embedding's transpose, as the authors' models tie them
  double lr = 1e-3, weight_decay = 0.1, max_grad_norm = 1.0;
  int64_t max_steps = 10000, eval_every = 200, patience = 10;  // patience: evaluations without improvement
  uint64_t seed = 42;  // train set seed; val seed + 1; extrapolation pairs seed + 1000, noise seed + 1000 + factor
};

// Errors name the option (as its command-line flag) and what was expected.
void validate(const MqarRunOptions& options);

// The model: `layers` blocks of `mixer` (no attention), `heads` heads of `head_dim` (a state of heads·head_dim²
// per layer for GDN, KZLA and M2), SwiGLU `ffn`, the head tied to the embedding unless not tie_embeddings.
ModelConfig mqar_model_config(MixerKind mixer, const MqarRunOptions& options);

// Every set a run uses, generated once and shared by the mixers compared.
struct MqarData {
  MqarSet train, val;
  std::vector<MqarSet> extrapolation;  // one per factor
};
MqarData make_mqar_data(const MqarRunOptions& options);

struct MqarResult {
  std::string mixer;
  int64_t params = 0, steps = 0, best_step = 0;
  double best_val = 0, train_seconds = 0;  // train_seconds includes the validation passes
  std::vector<double> accuracy;            // per factor, with the best weights
};

// Trains and evaluates on `device` (bf16 compute on CUDA, f32 on the CPU), printing a progress line per evaluation.
MqarResult train_mqar(MixerKind mixer, const MqarRunOptions& options, const MqarData& data, Device device);

}  // namespace primer::synthetic
