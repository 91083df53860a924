// `primer eval`: the loss and perplexity of a trained model (recipes/inference_model.h) on held-out data, computed by
// the trainer's own code (its data sources, held-out split and heldout_loss), so that a checkpoint evaluated on its
// recipe's data gives the loss its training run logged.
#pragma once
#include <cstdint>
#include <string>

#include "core/io/json.h"

namespace primer::recipes {

struct EvalOptions {
  std::string model;  // run directory, training checkpoint or Hugging Face directory
  // A text file or directory (bytes as tokens: byte-level models) or tokenized data (`primer tokenize`'s directory);
  // empty: a checkpoint's recipe's data.
  std::string data;
  double val_size = -1;        // held-out fraction of `data`; < 0: the recipe's (its default without one)
  int64_t cutoff_len = 0;      // tokens per row; 0: the recipe's
  int64_t batch_size = 0;      // rows per batch; 0: the recipe's per_device_train_batch_size
  int64_t max_batches = 0;     // 0: the recipe's eval_batches with its data, every held-out batch with --data
  std::string device = "cpu";  // cpu, cuda or auto
};

// {"model", "data", "loss", "perplexity", "tokens", "batches", "batch_size", "cutoff_len"}.
json::Value evaluate(const EvalOptions& options);

// The command: prints the result (as JSON with as_json) and returns 0.
int run_eval(const EvalOptions& options, bool as_json);

}  // namespace primer::recipes
