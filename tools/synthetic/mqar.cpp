// synthetic_mqar: MQAR length extrapolation (tools/synthetic/mqar_task.h) — generates the sets, trains a 2-block
// model of each mixer in --mixers at --seq, evaluates its best weights at --seq × each of --factors, and prints a
// markdown table (docs/mixers.md, "Synthetic tasks").
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdio>
#include <sstream>

#include "recipes/train_setup.h"
#include "tools/synthetic/mqar_train.h"

using namespace primer;

namespace {

std::vector<MixerKind> parse_mixers(const std::string& list) {
  std::vector<MixerKind> kinds;
  std::stringstream in(list);
  for (std::string token; std::getline(in, token, ',');) kinds.push_back(parse_mixer_token(token, "--mixers " + list));
  PRIMER_CHECK(!kinds.empty(), "--mixers: expected a comma-separated list of mixers, e.g. GDN,KZLA,M2");
  return kinds;
}

void print_table(const synthetic::MqarRunOptions& o, const std::vector<synthetic::MqarResult>& results) {
  std::string header = "| mixer | params | steps | best val step |", rule = "|---|---:|---:|---:|";
  for (const int64_t f : o.factors) {
    header += fmt::format(" acc @ {} |", o.task.seq * f);
    rule += "---:|";
  }
  fmt::print("\n{} train time |\n{}---:|\n", header, rule);
  for (const synthetic::MqarResult& r : results) {
    std::string row = fmt::format("| {} | {:.2f}M | {} | {} |", r.mixer, double(r.params) / 1e6, r.steps, r.best_step);
    for (const double a : r.accuracy) row += fmt::format(" {:.2f} |", 100 * a);
    fmt::print("{} {:.0f} s |\n", row, r.train_seconds);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines appear as they are printed, also in a log file
  synthetic::MqarRunOptions o;
  std::string device_name = "auto", mixers = "GDN,KZLA";
  CLI::App app{"synthetic_mqar: MQAR length extrapolation (train at --seq, evaluate at --seq x --factors)"};
  app.add_option("--device", device_name, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--mixers", mixers, "comma-separated mixers, each trained in turn (GDN,KZLA,M2,...)");
  app.add_option("--seq", o.task.seq, "training length");
  app.add_option("--pairs", o.task.pairs, "key-value pairs per sequence");
  app.add_option("--vocab", o.task.vocab, "vocabulary (keys in the lower half, values in the upper)");
  app.add_option("--query-start", o.task.query_start, "first position a query may take");
  app.add_option("--factors", o.factors, "evaluation lengths as multiples of --seq")->delimiter(',');
  app.add_option("--layers", o.layers, "blocks");
  app.add_option("--width", o.width, "model width");
  app.add_option("--heads", o.heads, "mixer heads");
  app.add_option("--head-dim", o.head_dim, "mixer head dimension (key and value)");
  app.add_option("--ffn", o.ffn, "SwiGLU width");
  app.add_option("--train-size", o.train_size, "training sequences");
  app.add_option("--val-size", o.val_size, "validation sequences (and sequences per extrapolation set)");
  app.add_option("--batch", o.batch, "sequences per step");
  app.add_option("--lr", o.lr, "constant learning rate");
  bool untied_head = false;
  app.add_flag("--untied-head", untied_head,
               "an LM head of its own (default: the embedding's transpose, as the authors' models)");
  app.add_option("--max-steps", o.max_steps, "optimizer steps at most");
  app.add_option("--eval-every", o.eval_every, "steps between validations");
  app.add_option("--patience", o.patience, "validations without improvement before stopping");
  app.add_option("--seed", o.seed, "data and initialisation seed");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  o.tie_embeddings = !untied_head;
  try {
    const std::vector<MixerKind> kinds = parse_mixers(mixers);
    const Device device = recipes::pick_device(device_name);
    const synthetic::MqarData data = synthetic::make_mqar_data(o);
    fmt::print(
        "MQAR: vocab {}, {} pairs, train {} x {} tokens, val {}, {} layers x width {}, {} heads x {}, batch {}, "
        "lr {}, {} head, on {}\n",
        o.task.vocab, o.task.pairs, o.train_size, o.task.seq, o.val_size, o.layers, o.width, o.heads, o.head_dim,
        o.batch, o.lr, o.tie_embeddings ? "tied" : "untied", device.str());
    std::vector<synthetic::MqarResult> results;
    for (const MixerKind kind : kinds) results.push_back(synthetic::train_mqar(kind, o, data, device));
    print_table(o, results);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "synthetic_mqar: error: %s\n", e.what());
    return 2;
  }
}
