// synthetic_a5: A5 state tracking (tools/synthetic/a5_task.h) — generates the sets, trains a model of each mixer in
// --mixers at each depth in --depths on sequences of --seq elements, evaluates its best weights at --seq × each of
// --factors, and prints a markdown table with whether each model solves the task (token accuracy ≥ 90%, the Kalman
// linear attention paper's criterion) at the training length (docs/mixers.md, "Synthetic tasks").
#include <fmt/core.h>

#include "core/check.h"
#include "tools/synthetic/a5_task.h"
#include "tools/synthetic/synthetic_cli.h"

using namespace primer;

int main(int argc, char** argv) {
  synthetic::SyntheticModel model;
  synthetic::SyntheticTraining training;
  training.lr = 3e-4;  // the Kalman linear attention paper's A5 setting
  training.patience = 25;
  synthetic::SyntheticRun run{.mixers = "KLA,GDN,M2"};
  int64_t seq = 32, train_size = 100000, val_size = 2000;
  std::vector<int64_t> depths = {1, 2}, factors = {1, 2};
  CLI::App app{"synthetic_a5: A5 state tracking (the running product of permutations) by mixer and depth"};
  synthetic::add_run_options(app, run);
  app.add_option("--depths", depths, "blocks per model, each trained in turn")->delimiter(',');
  app.add_option("--seq", seq, "training length (elements per sequence)");
  app.add_option("--factors", factors, "evaluation lengths as multiples of --seq (the first must be 1)")
      ->delimiter(',');
  synthetic::add_model_and_training_options(app, model, training, train_size, val_size);
  return synthetic::run_tool("synthetic_a5", app, argc, argv, run, [&](const auto& kinds, Device device) {
    PRIMER_CHECK(!depths.empty() && !factors.empty() && factors.front() == 1,
                 "--depths and --factors: expected at least one each, the first factor 1 (the training length)");
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
  });
}
