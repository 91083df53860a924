// synthetic_recall: long-context in-context recall (tools/synthetic/recall_task.h), the Kalman linear attention
// paper's "CR (hard)" MQAR — generates the sets, trains a 2-block model of each mixer in --mixers with next-token
// prediction, measures its best weights' accuracy on the recall queries, and prints a markdown table
// (docs/mixers.md, "Synthetic tasks"). Defaults: the paper's data sizes and its synthetic-task schedule (Table 10:
// AdamW at a constant 1e-3, no weight decay, clipping at 5) at its d = 256, batch 16.
#include <fmt/core.h>

#include "tools/synthetic/recall_task.h"
#include "tools/synthetic/synthetic_cli.h"

using namespace primer;

int main(int argc, char** argv) {
  synthetic::RecallSpec task;
  synthetic::SyntheticModel model;
  synthetic::SyntheticTraining training;
  training.batch = 16;
  training.weight_decay = 0.0;
  training.max_grad_norm = 5.0;
  synthetic::SyntheticRun run{.mixers = "KLA"};
  int64_t train_size = 12800, val_size = 1280;
  CLI::App app{"synthetic_recall: in-context recall at T = 2048 over a vocabulary of 256 (MAD's multi-query recall)"};
  synthetic::add_run_options(app, run);
  app.add_option("--seq", task.seq, "tokens per sequence (seq/2 key-value pairs)");
  app.add_option("--vocab", task.vocab, "vocabulary (keys in the lower half, values in the upper)");
  app.add_option("--layers", model.layers, "blocks");
  synthetic::add_model_and_training_options(app, model, training, train_size, val_size);
  return synthetic::run_tool("synthetic_recall", app, argc, argv, run, [&](const auto& kinds, Device device) {
    const synthetic::SyntheticData data = synthetic::make_recall_data(task, train_size, val_size, training.seed);
    fmt::print(
        "recall: vocab {}, {} tokens, train {}, val {} ({} queries), {} layers x width {}, {} heads x {}, batch {}, "
        "lr {}, weight decay {}, clip {}, on {}\n",
        task.vocab, task.seq, train_size, val_size, data.val.labelled(), model.layers, model.width, model.heads,
        model.head_dim, training.batch, training.lr, training.weight_decay, training.max_grad_norm, device.str());
    std::vector<synthetic::SyntheticResult> results;
    for (const synthetic::SyntheticMixer& kind : kinds)
      results.push_back(synthetic::train_synthetic(kind, model, training, data, device));
    synthetic::print_results(task.seq, {1}, results, false);
  });
}
