// synthetic_a5: A5 state tracking (tools/synthetic/a5_task.h) — generates the sets, trains a model of each mixer in
// --mixers at each depth in --depths on sequences of --seq elements, evaluates its best weights at --seq × each of
// --factors, and prints a markdown table with whether each model solves the task (token accuracy ≥ 90%, the Kalman
// linear attention paper's criterion) at the training length (docs/mixers.md, "Synthetic tasks").
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdio>

#include "recipes/train_setup.h"
#include "tools/synthetic/a5_task.h"
#include "tools/synthetic/synthetic_cli.h"

using namespace primer;

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines appear as they are printed, also in a log file
  synthetic::SyntheticModel model;
  synthetic::SyntheticTraining training;
  training.lr = 3e-4;  // the Kalman linear attention paper's A5 setting
  training.patience = 25;
  int64_t seq = 32, train_size = 100000, val_size = 2000;
  std::vector<int64_t> depths = {1, 2}, factors = {1, 2};
  std::string device_name = "auto", mixers = "KLA,GDN,M2";
  CLI::App app{"synthetic_a5: A5 state tracking (the running product of permutations) by mixer and depth"};
  app.add_option("--device", device_name, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--mixers", mixers,
                 "comma-separated mixers, each trained in turn (KLA,GDN,M2,...; KDA: GDN2 with gdn2.kda_gates)");
  app.add_option("--depths", depths, "blocks per model, each trained in turn")->delimiter(',');
  app.add_option("--seq", seq, "training length (elements per sequence)");
  app.add_option("--factors", factors, "evaluation lengths as multiples of --seq (the first must be 1)")
      ->delimiter(',');
  synthetic::add_model_and_training_options(app, model, training, train_size, val_size);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    const std::vector<synthetic::SyntheticMixer> kinds = synthetic::parse_mixer_list(mixers);
    PRIMER_CHECK(!depths.empty() && !factors.empty() && factors.front() == 1,
                 "--depths and --factors: expected at least one each, the first factor 1 (the training length)");
    const Device device = recipes::pick_device(device_name);
    const synthetic::SyntheticData data = synthetic::make_a5_data(seq, train_size, val_size, factors, training.seed);
    fmt::print("A5: {} elements, train {} x {} tokens, val {}, width {}, {} heads x {}, batch {}, lr {}, on {}\n",
               synthetic::kA5Order, train_size, seq, val_size, model.width, model.heads, model.head_dim, training.batch,
               training.lr, device.str());
    std::vector<synthetic::SyntheticResult> results;
    for (const synthetic::SyntheticMixer& kind : kinds)
      for (const int64_t depth : depths) {
        model.layers = depth;
        results.push_back(synthetic::train_synthetic(kind, model, training, data, device));
        const synthetic::SyntheticResult& r = results.back();
        fmt::print("{} x {}: best validation {:.2f}% at step {}, {:.2f}% at {} tokens with those weights\n", r.mixer,
                   r.layers, 100 * r.best_val, r.best_step, 100 * r.accuracy.front(), seq);
      }
    synthetic::print_results(seq, factors, results, true);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "synthetic_a5: error: %s\n", e.what());
    return 2;
  }
}
