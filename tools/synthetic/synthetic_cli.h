// The command line every synthetic task's executable shares: the device and the mixers to train, the model, the
// training schedule and the set sizes, and one way to parse, run and report errors.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "recipes/train_setup.h"
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

// Where a run trains (--device) and which mixers it compares (--mixers), each trained in turn.
struct SyntheticRun {
  std::string device = "auto", mixers;
};

inline void add_run_options(CLI::App& app, SyntheticRun& run) {
  app.add_option("--device", run.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--mixers", run.mixers,
                 "comma-separated mixers, each trained in turn (e.g. GDN,KZLA,M2,KLA; KDA: GDN2 with gdn2.kda_gates)");
}

// Parses the command line (--help exits 0, a mistake 2), then runs body(mixers, device); an error ends the tool
// with "<tool>: error: ..." and exit code 2. Progress lines are flushed as printed, also into a log file.
template <class Body>
int run_tool(const char* tool, CLI::App& app, int argc, char** argv, const SyntheticRun& run, Body body) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    body(parse_mixer_list(run.mixers), recipes::pick_device(run.device));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return 2;
  }
}

}  // namespace primer::synthetic
