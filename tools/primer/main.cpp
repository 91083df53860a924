// The primer command-line tool: `train` (a recipe, or the built-in default run), `tokenize`, the Priming steps
// (`select-layers`, `prime-init`, `unfuse`, `soup`, `export`, `import`), `inspect`, `plot`, `generate` and `eval`
// (tools/primer/model_use_commands.h); `--version`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "core/check.h"
#include "core/console.h"
#include "data/tokenize_job.h"
#include "layers/mixer_spec.h"
#include "parallel/comm/launch.h"
#include "recipes/default_run.h"
#include "recipes/hf_transfer.h"
#include "recipes/inspect.h"
#include "recipes/layer_selection.h"
#include "recipes/metrics_plot.h"
#include "recipes/prime_init.h"
#include "recipes/soup.h"
#include "recipes/trainer.h"
#include "recipes/unfuse.h"
#include "tools/primer/build_info.h"
#include "tools/primer/option_checks.h"
#include "tools/primer/model_use_commands.h"

int main(int argc, char** argv) {
  // A log redirected to a file or a pipe shows each line as it is printed, and keeps them when the job is killed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Under mpirun/srun: MPI up, rank 0 alone on stdout, other ranks' errors prefixed on stderr (docs/distributed.md).
  primer::parallel::WorldScope world(argc, argv);
  CLI::App app{"primer: train hybrid State-Space/Attention language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", primer::tools::build_info,
                       "print the version, the source commit and the build configuration, then exit");

  primer::recipes::DefaultRunOptions run;
  std::string recipe;
  std::vector<std::string> overrides;
  CLI::App* train =
      app.add_subcommand("train", "train a model from a YAML recipe (with none: the built-in default run)");
  train->add_option("recipe", recipe, "recipe YAML (docs/recipes.md lists every key)");
  train->add_option("--set", overrides, "override a recipe key: --set learning_rate=1e-4 (repeatable)");
  // Options of the built-in default run (ignored with a recipe, whose keys --set overrides).
  train->add_option("--corpus", run.corpus,
                    "text file to train on (file or directory; default: the license texts every Debian ships)");
  train->add_option("--device", run.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  train->add_option("--out", run.out_dir, "run directory (metrics.jsonl)");
  train->add_option("--steps", run.steps, "optimizer steps")->check(primer::tools::positive_number());
  train->add_option("--batch", run.batch, "sequences per step")->check(primer::tools::positive_number());
  train->add_option("--seq", run.seq, "tokens per sequence")->check(primer::tools::positive_number());
  train->add_option("--hidden", run.hidden, "model width")->check(primer::tools::positive_number());
  train->add_option("--layers", run.layers, "blocks")->check(primer::tools::positive_number());
  train->add_option("--lr", run.lr, "peak learning rate")->check(primer::tools::positive_number());
  train->add_option("--seed", run.seed, "initialisation and data seed");
  train->add_option("--log-every", run.log_every, "steps between log lines")->check(primer::tools::positive_number());
  train->add_flag("--recompute", run.recompute, "recompute each block's activations in backward");

  std::string job;
  std::vector<std::string> job_overrides;
  CLI::App* tokenize = app.add_subcommand(
      "tokenize", "tokenize text, JSONL and chat files into HDF5 shards (docs/data.md lists the keys)");
  tokenize->add_option("config", job, "tokenize job YAML")->required();
  tokenize->add_option("--set", job_overrides, "override a job key: --set workers=4 (repeatable)");

  std::string stage0_recipe;
  std::vector<std::string> stage0_overrides;
  CLI::App* prime_init = app.add_subcommand(
      "prime-init", "Priming Stage 0: a Transformer checkpoint -> a fused hybrid checkpoint (docs/stage0.md)");
  prime_init->add_option("recipe", stage0_recipe, "Stage 0 YAML")->required();
  prime_init->add_option("--set", stage0_overrides, "override a key: --set hybrid_ratio=0.5 (repeatable)");

  std::string fused_dir, unfused_dir;
  CLI::App* unfuse = app.add_subcommand(
      "unfuse", "after Stage 1: drop the teacher attention of a fused checkpoint, write the standalone hybrid");
  unfuse->add_option("checkpoint", fused_dir, "fused Hugging Face checkpoint directory")->required();
  unfuse->add_option("--save-dir", unfused_dir, "output directory (default: <checkpoint>_unfused)");

  std::vector<std::string> soup_inputs;
  std::vector<double> soup_weights;
  std::string soup_out;
  CLI::App* soup = app.add_subcommand("soup", "average the parameters of Hugging Face checkpoints of one model");
  soup->add_option("checkpoints", soup_inputs, "checkpoint directories")->required();
  soup->add_option("--out", soup_out, "output directory")->required();
  soup->add_option("--weights", soup_weights, "one weight per checkpoint, summing to 1 (default: uniform)");

  std::string select_recipe;
  std::vector<std::string> select_overrides;
  primer::recipes::SelectLayersOptions select;
  CLI::App* select_layers = app.add_subcommand(
      "select-layers", "score each attention layer by the held-out loss with only it windowed (layer selection)");
  select_layers->add_option("recipe", select_recipe, "a train recipe naming the model and its held-out data")
      ->required();
  select_layers->add_option("--set", select_overrides, "override a recipe key (repeatable)");
  select_layers->add_option("--window", select.window, "sliding window of the trial layer")
      ->check(primer::tools::positive_number());
  select_layers->add_option("--ratio", select.ratio, "hybrid ratio of the printed patterns")
      ->check(primer::tools::number_in(0, 1));
  select_layers->add_option("--mixer", select.mixer,
                            "mixer token of the printed patterns (" +
                                primer::mixer_tokens([](const primer::MixerSpec& m) { return m.is_ssm; }) + ")");
  select_layers->add_option("--out", select.out_csv, "CSV of the scores (default: <output_dir>/layer_importance.csv)");

  std::string export_recipe, export_checkpoint = "latest", export_out, export_dtype = "bf16";
  std::vector<std::string> export_overrides;
  CLI::App* export_cmd = app.add_subcommand(
      "export", "write a training checkpoint as a Hugging Face checkpoint (the reference's hybrid format)");
  export_cmd->add_option("recipe", export_recipe, "the run's recipe (its model and output_dir)")->required();
  export_cmd->add_option("--checkpoint", export_checkpoint, "latest, or a checkpoint directory");
  export_cmd->add_option("--out", export_out, "output directory")->required();
  export_cmd->add_option("--dtype", export_dtype, "bf16, fp16 or fp32");
  export_cmd->add_option("--set", export_overrides, "override a recipe key (repeatable)");

  std::string import_in, import_out, import_dtype = "bf16";
  CLI::App* import_cmd = app.add_subcommand(
      "import", "check a Hugging Face checkpoint (Transformer or hybrid) tensor by tensor and rewrite it for primer");
  import_cmd->add_option("checkpoint", import_in, "Hugging Face checkpoint directory")->required();
  import_cmd->add_option("--out", import_out, "output directory")->required();
  import_cmd->add_option("--dtype", import_dtype, "bf16, fp16 or fp32");

  std::string inspect_path;
  bool inspect_verify = false, inspect_json = false;
  CLI::App* inspect = app.add_subcommand(
      "inspect", "say what a run directory, training checkpoint, Hugging Face model or tokenized data holds");
  inspect->add_option("path", inspect_path, "the directory")->required();
  inspect->add_flag("--verify", inspect_verify, "check every checksum (CRC32C, Fletcher32) and count NaN/inf values");
  inspect->add_flag("--json", inspect_json, "print the report as JSON");

  primer::tools::ModelUseCommands model_use(app);
  std::vector<std::string> plot_runs;
  std::string plot_out, plot_x = "step";
  CLI::App* plot = app.add_subcommand("plot", "draw the training curves of runs (their metrics.jsonl) into one chart");
  plot->add_option("runs", plot_runs, "run directories (or metrics files)")->required();
  plot->add_option("--out", plot_out, "the chart: FILE.svg, or FILE.html with the SVG inline")->required();
  plot->add_option("--x", plot_x, "the x axis: step or tokens")->check(CLI::IsMember({"step", "tokens"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& done) {  // --help, --version: printed, exit 0
    return app.exit(done);
  } catch (const CLI::ParseError& e) {  // a missing or unknown option ends like every other error
    std::fprintf(stderr, "primer: error: %s (primer --help, or primer <command> --help, lists the options)\n",
                 e.what());
    return 2;
  }
  const primer::parallel::World& ranks = primer::parallel::world();
  if (ranks.size > 1 && !(train->parsed() && !recipe.empty()) && !model_use.runs_on_ranks()) {
    if (ranks.rank == 0)
      primer::console::error(
          "primer {}: runs on one process, and was launched on {} ranks (by {}); under mpirun or "
          "srun, run `primer train RECIPE` or `primer eval MODEL`",
          app.get_subcommands().front()->get_name(), ranks.size, ranks.launcher);
    return 2;
  }
  try {
    if (train->parsed()) {
      if (!recipe.empty()) {
        // The default run's options do nothing with a recipe: refuse them rather than train something else.
        for (const char* name : {"--corpus", "--device", "--out", "--steps", "--batch", "--seq", "--hidden", "--layers",
                                 "--lr", "--seed", "--log-every", "--recompute"})
          PRIMER_CHECK(train->count(name) == 0,
                       "train: {} applies to the built-in default run; with a recipe set its key instead (--set "
                       "max_steps=..., --set learning_rate=..., --set output_dir=...; docs/recipes.md)",
                       name);
        return primer::recipes::run_train(recipe, overrides);
      }
      PRIMER_CHECK(overrides.empty(), "--set needs a recipe");
      return primer::recipes::run_default(run);
    }
    if (tokenize->parsed()) return primer::data::run_tokenize(job, job_overrides);
    if (prime_init->parsed()) return primer::recipes::run_prime_init(stage0_recipe, stage0_overrides);
    if (unfuse->parsed()) return primer::recipes::run_unfuse(fused_dir, unfused_dir);
    if (select_layers->parsed()) return primer::recipes::run_select_layers(select_recipe, select_overrides, select);
    if (export_cmd->parsed())
      return primer::recipes::run_export(export_recipe, export_overrides, export_checkpoint, export_out,
                                         primer::recipes::parse_weights_dtype(export_dtype, "--dtype"));
    if (import_cmd->parsed())
      return primer::recipes::run_import(import_in, import_out,
                                         primer::recipes::parse_weights_dtype(import_dtype, "--dtype"));
    if (soup->parsed()) return primer::recipes::run_soup(soup_inputs, soup_weights, soup_out);
    if (inspect->parsed()) return primer::recipes::run_inspect(inspect_path, inspect_verify, inspect_json);
    if (model_use.parsed()) return model_use.run();
    if (plot->parsed()) return primer::recipes::run_plot(plot_runs, plot_out, plot_x);
  } catch (const std::exception& e) {  // primer::Error, and whatever a library throws (filesystem, allocation)
    const std::string rank = ranks.size > 1 ? fmt::format("[rank {}] ", ranks.rank) : "";
    std::fprintf(stderr, "%sprimer: error: %s\n", rank.c_str(), e.what());
    // The other ranks may be waiting for this one in a collective: end them too.
    if (ranks.size > 1) primer::parallel::abort_job(2);
    return 2;
  }
  return 0;
}
