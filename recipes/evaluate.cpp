#include "recipes/evaluate.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include "core/check.h"
#include "data/tokenizer.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/world_communicator.h"
#include "recipes/inference_model.h"
#include "recipes/train_data.h"
#include "recipes/train_loop.h"
#include "recipes/train_objective.h"
#include "recipes/train_setup.h"

namespace primer::recipes {
namespace {
namespace fs = std::filesystem;

// `primer tokenize`'s output directory, as opposed to text.
bool is_tokenized_data(const std::string& data) { return fs::is_regular_file(fs::path(data) / "manifest.json"); }

// A recipe holding only `data` as its data keys (the model is loaded already; the recipe needs one to validate).
std::string data_recipe(const std::string& data) {
  PRIMER_CHECK(fs::exists(data), "--data '{}': no such file or directory", data);
  const bool tokenized = is_tokenized_data(data);
  json::Value recipe;
  recipe["model_config"] = json::Object{};
  recipe["output_dir"] = fs::temp_directory_path().string();
  recipe["max_steps"] = 1;
  recipe[tokenized ? "tokenized_path" : "dataset"] = json::Array{json::Value(data)};
  return json::dump(recipe);  // JSON is YAML
}

}  // namespace

json::Value evaluate(const EvalOptions& o, parallel::Communicator* host) {
  const Device device = pick_device(o.device);
  InferenceModel m = load_inference_model(o.model, device, device.is_cuda() ? DType::BF16 : DType::F32);
  PRIMER_CHECK(!o.data.empty() || !m.recipe_yaml.empty(),
               "eval: '{}' is a Hugging Face model, which carries no data; pass --data", o.model);
  std::vector<std::string> overrides;
  if (o.val_size >= 0) overrides.push_back(fmt::format("val_size={}", o.val_size));
  if (o.cutoff_len > 0) overrides.push_back(fmt::format("cutoff_len={}", o.cutoff_len));
  if (o.batch_size > 0) overrides.push_back(fmt::format("per_device_train_batch_size={}", o.batch_size));
  const config::Config cfg = o.data.empty() ? recipe_from_yaml(m.recipe_yaml, m.source, overrides)
                                            : recipe_from_yaml(data_recipe(o.data), "--data " + o.data, overrides);
  const int64_t batch = cfg.get_int("per_device_train_batch_size"), seq = cfg.get_int("cutoff_len");
  // Text given with --data goes through the model's tokenizer when it has one (a recipe's own data is read as it
  // trained).
  std::optional<data::Tokenizer> tokenizer;
  if (!o.data.empty() && !m.tokenizer_dir.empty() && !is_tokenized_data(o.data))
    tokenizer = data::Tokenizer::load(m.tokenizer_dir);
  const std::unique_ptr<TrainData> data = make_train_data(cfg, batch, seq, {}, tokenizer ? &*tokenizer : nullptr);
  PRIMER_CHECK(data->vocab_size() <= m.config.vocab_size,
               "eval: the data's ids reach {} ({}), beyond the model's vocabulary of {}", data->vocab_size(),
               data->describe(), m.config.vocab_size);
  const int64_t batches = std::min(o.max_batches > 0 ? o.max_batches
                                   : o.data.empty()  ? cfg.get_int("eval_batches")
                                                     : data->heldout_batches(),
                                   data->heldout_batches());
  const HeldoutScore score = heldout_score(*m.model, *data, batches, device, host, HeldoutSplit::WholeBatches);
  json::Value r;
  r["model"] = m.source;
  r["data"] = data->describe();
  r["loss"] = score.loss;
  r["perplexity"] = std::exp(score.loss);
  r["tokens"] = score.tokens;
  r["batches"] = batches;
  r["batch_size"] = batch;
  r["cutoff_len"] = seq;
  return r;
}

int run_eval(const EvalOptions& o, bool as_json) {
  // Under mpirun each rank loads the model (onto its own GPU with CUDA) and the ranks sum their losses on the host.
  std::unique_ptr<parallel::Communicator> host;
  if (parallel::world().size > 1) {
    if (o.device != "cpu") parallel::select_local_gpu();
    host = parallel::make_world_communicator(Device::cpu(), {}, /*announce=*/false);  // stdout is the result
  }
  const json::Value r = evaluate(o, host.get());
  const json::Object& v = r.as_object();
  if (as_json) {
    fmt::print("{}\n", json::dump(r));
  } else {
    fmt::print("eval: {} on {}\nloss {:.6f} | perplexity {:.4f} | {} tokens in {} batches of {} x {}\n",
               v.find("model")->as_string(), v.find("data")->as_string(), v.find("loss")->as_double(),
               v.find("perplexity")->as_double(), v.find("tokens")->as_int(), v.find("batches")->as_int(),
               v.find("batch_size")->as_int(), v.find("cutoff_len")->as_int());
  }
  return 0;
}

}  // namespace primer::recipes
