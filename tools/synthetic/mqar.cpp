// synthetic_mqar: MQAR length extrapolation (tools/synthetic/mqar_task.h) — generates the sets, trains a 2-block
// model of each mixer in --mixers at --seq, evaluates its best weights at --seq × each of --factors, and prints a
// markdown table (docs/mixers.md, "Synthetic tasks").
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdio>

#include "recipes/train_setup.h"
#include "tools/synthetic/mqar_task.h"
#include "tools/synthetic/synthetic_cli.h"

using namespace primer;

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines appear as they are printed, also in a log file
  synthetic::MqarSpec task;
  synthetic::SyntheticModel model;
  synthetic::SyntheticTraining training;
  int64_t train_size = 20000, val_size = 2000;  // val_size is also each extrapolation set's size
  std::vector<int64_t> factors = {1, 2, 4, 8};  // extrapolation lengths: task.seq * factor
  std::string device_name = "auto", mixers = "GDN,KZLA";
  CLI::App app{"synthetic_mqar: MQAR length extrapolation (train at --seq, evaluate at --seq x --factors)"};
  app.add_option("--device", device_name, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--mixers", mixers,
                 "comma-separated mixers, each trained in turn (GDN,KZLA,M2,...; KDA: GDN2 with gdn2.kda_gates)");
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  model.tie_embeddings = !untied_head;
  try {
    const std::vector<synthetic::SyntheticMixer> kinds = synthetic::parse_mixer_list(mixers);
    const Device device = recipes::pick_device(device_name);
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
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "synthetic_mqar: error: %s\n", e.what());
    return 2;
  }
}
