// synthetic_mqar: MQAR length extrapolation (tools/synthetic/mqar_task.h) — generates the sets, trains a 2-block
// model of each mixer in --mixers at --seq, evaluates its best weights at --seq × each of --factors, and prints a
// markdown table (docs/mixers.md, "Synthetic tasks").
#include <fmt/core.h>

#include "tools/synthetic/mqar_task.h"
#include "tools/synthetic/synthetic_cli.h"

using namespace primer;

int main(int argc, char** argv) {
  synthetic::MqarSpec task;
  synthetic::SyntheticModel model;
  synthetic::SyntheticTraining training;
  synthetic::SyntheticRun run{.mixers = "GDN,KZLA"};
  int64_t train_size = 20000, val_size = 2000;  // val_size is also each extrapolation set's size
  std::vector<int64_t> factors = {1, 2, 4, 8};  // extrapolation lengths: task.seq * factor
  CLI::App app{"synthetic_mqar: MQAR length extrapolation (train at --seq, evaluate at --seq x --factors)"};
  synthetic::add_run_options(app, run);
  app.add_option("--seq", task.seq, "training length");
  app.add_option("--pairs", task.pairs, "key-value pairs per sequence");
  app.add_option("--vocab", task.vocab, "vocabulary (keys in the lower half, values in the upper)");
  app.add_option("--query-start", task.query_start, "first position a query may take");
  app.add_option("--factors", factors, "evaluation lengths as multiples of --seq")->delimiter(',');
  app.add_option("--layers", model.layers, "blocks");
  bool untied_head = false;
  app.add_flag("--untied-head", untied_head,
               "an LM head of its own (default: the embedding's transpose, as the authors' models)");
  synthetic::add_model_and_training_options(app, model, training, train_size, val_size);
  return synthetic::run_tool("synthetic_mqar", app, argc, argv, run, [&](const auto& kinds, Device device) {
    model.tie_embeddings = !untied_head;
    const synthetic::SyntheticData data = synthetic::make_mqar_data(task, train_size, val_size, factors, training.seed);
    fmt::print(
        "MQAR: vocab {}, {} pairs, train {} x {} tokens, val {}, {} layers x width {}, {} heads x {}, batch {}, "
        "lr {}, {} head, on {}\n",
        task.vocab, task.pairs, train_size, task.seq, val_size, model.layers, model.width, model.heads, model.head_dim,
        training.batch, training.lr, model.tie_embeddings ? "tied" : "untied", device.str());
    std::vector<synthetic::SyntheticResult> results;
    for (const synthetic::SyntheticMixer& kind : kinds)
      results.push_back(synthetic::train_synthetic(kind, model, training, data, device));
    synthetic::print_results(task.seq, factors, results, false);
  });
}
