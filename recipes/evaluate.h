// `primer eval`: the loss and perplexity of a trained model (recipes/inference_model.h) on held-out data, computed by
// the trainer's own code (its data sources, held-out split and heldout_score), so that a checkpoint evaluated on its
// recipe's data gives the loss its training run logged. Under mpirun each rank scores its share of the batches.
#pragma once
#include <cstdint>
#include <string>

#include "core/io/json.h"
#include "parallel/comm/communicator.h"

namespace primer::recipes {

struct EvalOptions {
  std::string model;  // run directory, training checkpoint or Hugging Face directory
  // A text file or directory (through the model's tokenizer; bytes as tokens for a model without one) or tokenized
  // data (`primer tokenize`'s directory); empty: a checkpoint's recipe's data.
  std::string data;
  double val_size = -1;        // held-out fraction of `data`; < 0: the recipe's (its default without one)
  int64_t cutoff_len = 0;      // tokens per row; 0: the recipe's
  int64_t batch_size = 0;      // rows per batch; 0: the recipe's per_device_train_batch_size
  int64_t max_batches = 0;     // 0: the recipe's eval_batches with its data, every held-out batch with --data
  std::string device = "cpu";  // cpu, cuda or auto
};

// {"model", "data", "loss", "perplexity", "tokens", "batches", "batch_size", "cutoff_len"}. With `host` (collective
// over its ranks), rank r of n scores batches r, r + n, ... and every rank returns the sums over all of them: the
// one-process result.
json::Value evaluate(const EvalOptions& options, parallel::Communicator* host = nullptr);

// The command, on every rank of the job (one process, or each rank of an mpirun/srun launch): rank 0 prints the
// result (as JSON with as_json); returns 0.
int run_eval(const EvalOptions& options, bool as_json);

}  // namespace primer::recipes
