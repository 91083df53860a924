// The command-line options every synthetic task's executable shares: the model, the training schedule and the set
// sizes.
#pragma once
#include <CLI/CLI.hpp>

#include "tools/synthetic/synthetic_train.h"

namespace primer::synthetic {

inline void add_model_and_training_options(CLI::App& app, SyntheticModel& model, SyntheticTraining& training,
                                           int64_t& train_size, int64_t& val_size) {
  app.add_option("--width", model.width, "model width");
  app.add_option("--heads", model.heads, "mixer heads");
  app.add_option("--head-dim", model.head_dim, "mixer head dimension (key and value)");
  app.add_option("--ffn", model.ffn, "SwiGLU width");
  app.add_option("--train-size", train_size, "training sequences");
  app.add_option("--val-size", val_size, "validation sequences (and sequences per evaluation set)");
  app.add_option("--batch", training.batch, "sequences per step");
  app.add_option("--lr", training.lr, "constant learning rate");
  app.add_option("--weight-decay", training.weight_decay, "AdamW's decoupled weight decay");
  app.add_option("--clip", training.max_grad_norm, "the gradient norm is clipped to this");
  app.add_option("--max-steps", training.max_steps, "optimizer steps at most");
  app.add_option("--eval-every", training.eval_every, "steps between validations");
  app.add_option("--patience", training.patience, "validations without improvement before stopping");
  app.add_option("--seed", training.seed, "data and initialisation seed");
}

}  // namespace primer::synthetic
