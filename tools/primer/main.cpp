// The primer command-line tool. Subcommands land with their capabilities: `train` (a recipe, or the built-in
// default run) and `tokenize`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "core/check.h"
#include "data/tokenize_job.h"
#include "recipes/default_run.h"
#include "recipes/trainer.h"

int main(int argc, char** argv) {
  CLI::App app{"primer: train hybrid State-Space/Attention language models"};
  app.require_subcommand(1);

  primer::recipes::DefaultRunOptions run;
  std::string recipe;
  std::vector<std::string> overrides;
  CLI::App* train = app.add_subcommand("train", "train a model from a YAML recipe (with none: the built-in default run)");
  train->add_option("recipe", recipe, "recipe YAML (docs/recipes.md lists every key)");
  train->add_option("--set", overrides, "override a recipe key: --set learning_rate=1e-4 (repeatable)");
  // Options of the built-in default run (ignored with a recipe, whose keys --set overrides).
  train->add_option("--corpus", run.corpus, "text file to train on (file or directory; default: the license texts every Debian ships)");
  train->add_option("--device", run.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  train->add_option("--out", run.out_dir, "run directory (metrics.jsonl)");
  train->add_option("--steps", run.steps, "optimizer steps")->check(CLI::PositiveNumber);
  train->add_option("--batch", run.batch, "sequences per step")->check(CLI::PositiveNumber);
  train->add_option("--seq", run.seq, "tokens per sequence")->check(CLI::PositiveNumber);
  train->add_option("--hidden", run.hidden, "model width")->check(CLI::PositiveNumber);
  train->add_option("--layers", run.layers, "blocks")->check(CLI::PositiveNumber);
  train->add_option("--lr", run.lr, "peak learning rate")->check(CLI::PositiveNumber);
  train->add_option("--seed", run.seed, "initialisation and data seed");
  train->add_option("--log-every", run.log_every, "steps between log lines")->check(CLI::PositiveNumber);
  train->add_flag("--recompute", run.recompute, "recompute each block's activations in backward");

  std::string job;
  std::vector<std::string> job_overrides;
  CLI::App* tokenize =
      app.add_subcommand("tokenize", "tokenize text, JSONL and chat files into HDF5 shards (docs/data.md lists the keys)");
  tokenize->add_option("config", job, "tokenize job YAML")->required();
  tokenize->add_option("--set", job_overrides, "override a job key: --set workers=4 (repeatable)");

  CLI11_PARSE(app, argc, argv);
  try {
    if (train->parsed()) {
      if (!recipe.empty()) return primer::recipes::run_train(recipe, overrides);
      PRIMER_CHECK(overrides.empty(), "--set needs a recipe");
      return primer::recipes::run_default(run);
    }
    if (tokenize->parsed()) return primer::data::run_tokenize(job, job_overrides);
  } catch (const primer::Error& e) {
    std::fprintf(stderr, "primer: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
