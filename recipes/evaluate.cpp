#include "recipes/evaluate.h"

#include <cmath>
#include <filesystem>

#include "core/check.h"
#include "recipes/inference_model.h"
#include "recipes/train_data.h"
#include "recipes/train_loop.h"
#include "recipes/train_objective.h"
#include "recipes/train_setup.h"

namespace primer::recipes {
namespace {
namespace fs = std::filesystem;

// A recipe holding only `data` as its data keys (the model is loaded already; the recipe needs one to validate).
std::string data_recipe(const std::string& data) {
  PRIMER_CHECK(fs::exists(data), "--data '{}': no such file or directory", data);
  const bool tokenized = fs::is_regular_file(fs::path(data) / "manifest.json");
  json::Value recipe;
  recipe["model_config"] = json::Object{};
  recipe["output_dir"] = fs::temp_directory_path().string();
  recipe["max_steps"] = 1;
  recipe[tokenized ? "tokenized_path" : "dataset"] = json::Array{json::Value(data)};
  return json::dump(recipe);  // JSON is YAML
}

}  // namespace

json::Value evaluate(const EvalOptions& o) {
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
  const std::unique_ptr<TrainData> data = make_train_data(cfg, batch, seq);
  PRIMER_CHECK(data->vocab_size() <= m.config.vocab_size,
               "eval: the data's ids reach {} ({}), beyond the model's vocabulary of {}", data->vocab_size(),
               data->describe(), m.config.vocab_size);
  const int64_t batches = std::min(o.max_batches > 0 ? o.max_batches
                                   : o.data.empty()  ? cfg.get_int("eval_batches")
                                                     : data->heldout_batches(),
                                   data->heldout_batches());
  const double loss = heldout_loss(*m.model, *data, batches, device);
  int64_t tokens = 0;
  data::Batch b;
  for (int64_t i = 0; i < batches; ++i) {
    data->heldout_batch(i, b);
    tokens += count_targets(b);
  }
  json::Value r;
  r["model"] = m.source;
  r["data"] = data->describe();
  r["loss"] = loss;
  r["perplexity"] = std::exp(loss);
  r["tokens"] = tokens;
  r["batches"] = batches;
  r["batch_size"] = batch;
  r["cutoff_len"] = seq;
  return r;
}

int run_eval(const EvalOptions& o, bool as_json) {
  const json::Value r = evaluate(o);
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
