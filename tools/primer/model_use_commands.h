// The commands that use a trained model, `generate` and `eval` (docs/using.md), registered on the CLI apart from
// main.cpp's training and conversion commands.
#pragma once
#include <CLI/CLI.hpp>

#include "recipes/evaluate.h"
#include "recipes/generate.h"

namespace primer::tools {

class ModelUseCommands {
 public:
  explicit ModelUseCommands(CLI::App& app);  // adds the subcommands and their options
  bool parsed() const { return generate_->parsed() || eval_->parsed(); }
  bool runs_on_ranks() const { return eval_->parsed(); }  // eval shares its batches among mpirun's ranks
  int run() const;                                        // the parsed one's exit code; errors throw

 private:
  CLI::App* generate_ = nullptr;
  CLI::App* eval_ = nullptr;
  recipes::GenerateOptions generation_;
  recipes::EvalOptions evaluation_;
  bool eval_json_ = false;
};

}  // namespace primer::tools
