#include "tests/dist/train_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/config/config.h"
#include "core/io/json.h"
#include "core/io/safetensors.h"
#include "parallel/comm/self_communicator.h"
#include "recipes/train_schema.h"
#include "recipes/trainer.h"
#include "tests/dist/dist_env.h"
#include "tests/support/test_util.h"

namespace primer::test {
namespace {

// adam_epsilon 1e-6: AdamW stays a smooth function of the gradient down to 1e-6, so summation-order rounding is not
// turned into ±lr steps on near-zero gradient elements (tests/dist/test_train.cpp, "Tolerance").
// The data is a frozen text (tests/data/dist_corpus.txt, a copy of an earlier README), not the living README: the
// tolerances were measured on it, and an edit that adds rare bytes (→, ×) gives their embedding rows gradients
// below ε, where the update follows f32 summation noise (seen: 6e-4 relative on embed_tokens after a README edit).
std::string recipe_text(const TinyRun& run, int ranks, const std::string& out_dir) {
  std::string text = fmt::format(
      "model_config: {{model_type: qwen3, vocab_size: 256, {},\n"
      "  num_hidden_layers: {},\n"
      "  max_position_embeddings: 64, tie_word_embeddings: {}, torch_dtype: float32}}\n"
      "dataset: {}/tests/data/dist_corpus.txt\ncutoff_len: {}\nval_size: 0.1\n"
      "per_device_train_batch_size: {}\ngradient_accumulation_steps: {}\nzero_stage: {}\n"
      "learning_rate: 3.0e-3\nadam_epsilon: 1.0e-6\nlr_scheduler_type: {}\nwarmup_steps: 1\nmax_steps: "
      "{}\nlogging_steps: 1\neval_steps: 0\neval_batches: 2\n"
      "save_steps: {}\ndevice: {}\nseed: 11\ndisable_gradient_checkpointing: {}\noutput_dir: {}\n",
      // The GPU attention kernels take head_dim 64 or 128.
      run.cuda
          ? "hidden_size: 128, intermediate_size: 256, num_attention_heads: 2, num_key_value_heads: 1, head_dim: 64"
          : "hidden_size: 32, intermediate_size: 64, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8",
      run.pattern.empty() ? 2 : std::count(run.pattern.begin(), run.pattern.end(), '-') + 1,
      run.tied ? "true" : "false", PRIMER_SOURCE_DIR, run.cutoff, run.global_batch / (ranks > 1 ? ranks / run.sp : 1),
      run.accumulation, run.zero_stage, run.schedule, run.max_steps, run.save_steps, run.cuda ? "cuda" : "cpu",
      run.recompute ? "false" : "true", out_dir);
  if (!run.pattern.empty())
    text += fmt::format(
        "config_overrides_json: {{\"model_type\": \"hybrid_qwen3\", \"hybrid_override_pattern\": \"{}\"{}}}\n",
        run.pattern, run.overrides.empty() ? "" : ", " + run.overrides);
  if (run.sp > 1 && ranks > 1) {  // the one-process reference of the same run keeps whole rows
    text += fmt::format("sequence_parallel_size: {}\n", run.sp);
    const std::pair<const char*, const std::string*> keys[] = {{"sequence_parallel_mode", &run.sp_mode},
                                                               {"sequence_parallel_layout", &run.sp_layout},
                                                               {"sequence_parallel_ssm_mode", &run.ssm_mode},
                                                               {"sequence_parallel_state_passing", &run.state_passing}};
    for (const auto& [key, value] : keys)
      if (!value->empty()) text += fmt::format("{}: {}\n", key, *value);
  }
  if (run.distill) text += "stage: hkd\n";
  if (!run.learnable.empty()) text += "hybrid_learnable_params: " + run.learnable + "\n";
  if (!run.resume.empty()) text += "resume_from_checkpoint: " + run.resume + "\n";
  return text;
}

double train_with(const TinyRun& run, const std::string& out_dir, parallel::Communicator& ranks,
                  parallel::Communicator& tensors) {
  const int data_ranks = ranks.size() > 1 ? ranks.size() / run.sp : 1;
  EXPECT_EQ(run.global_batch % data_ranks, 0) << "the global batch must divide over the data-parallel ranks";
  const std::string recipe = out_dir + ".yaml";
  if (ranks.rank() == 0) {
    std::filesystem::create_directories(std::filesystem::path(out_dir).parent_path());
    std::ofstream(recipe) << recipe_text(run, ranks.size(), out_dir);
  }
  ranks.barrier("recipe written");
  const config::Config cfg = config::load_config(recipe, recipes::train_schema());
  return recipes::train(cfg, recipe, {&tensors, &ranks}).final_loss;
}

}  // namespace

std::string shared_test_dir(const std::string& name) {
  Tensor seed = Tensor::full({1}, double(fresh_seed() % (1ull << 40)), DType::I64);
  world_comm().broadcast(seed, 0, "test-dir");
  const std::string dir = fmt::format("{}/primer-dist-{}-{}", testing::TempDir(), name, int64_t(seed.item()));
  if (world_comm().rank() == 0) std::filesystem::create_directories(dir);
  world_comm().barrier("test-dir");
  return dir;
}

double train_on_world(const TinyRun& run, const std::string& out_dir) {
  return train_with(run, out_dir, world_comm(), run.cuda ? gpu_world_comm() : world_comm());
}

double train_on_one_process(const TinyRun& run, const std::string& out_dir) {
  parallel::SelfCommunicator self({kDistTestTimeoutSeconds});
  return train_with(run, out_dir, self, self);
}

std::map<int64_t, double> train_losses(const std::string& out_dir) {
  std::map<int64_t, double> out;
  const std::string path = out_dir + "/metrics.jsonl";
  std::ifstream in(path);
  int64_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    const json::Value v = json::parse(line, path, ++line_number);
    const json::Node n(v, path);
    if (n.has("loss")) out[n.at("step").as_int()] = n.at("loss").as_double();
  }
  return out;
}

WeightDifference weight_difference(const std::string& out_a, const std::string& out_b) {
  const io::SafetensorsCheckpoint a(out_a), b(out_b);
  EXPECT_EQ(a.names(), b.names());
  WeightDifference d;
  double all_diff2 = 0, all_norm2 = 0;
  for (const std::string& name : a.names()) {
    const std::vector<float> x = a.load(name, DType::F32).to_vector<float>();
    const std::vector<float> y = b.load(name, DType::F32).to_vector<float>();
    double diff2 = 0, norm2 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      d.max_abs = std::max(d.max_abs, double(std::fabs(x[i] - y[i])));
      diff2 += double(x[i] - y[i]) * double(x[i] - y[i]);
      norm2 += double(y[i]) * double(y[i]);
    }
    all_diff2 += diff2;
    all_norm2 += norm2;
    const double relative = norm2 > 0 ? std::sqrt(diff2 / norm2) : std::sqrt(diff2);
    if (relative > d.max_relative) {
      d.max_relative = relative;
      d.worst_tensor = name;
    }
  }
  d.whole_relative = all_norm2 > 0 ? std::sqrt(all_diff2 / all_norm2) : std::sqrt(all_diff2);
  return d;
}

void expect_same_training(const std::string& reference, const std::string& run, Tolerances tolerances,
                          const std::string& what) {
  const auto want = train_losses(reference), got = train_losses(run);
  ASSERT_EQ(want.size(), got.size()) << what;
  double worst_loss = 0;
  for (const auto& [step, loss] : want) {
    ASSERT_TRUE(got.count(step)) << what << ": no loss at step " << step;
    EXPECT_NEAR(got.at(step), loss, tolerances.loss * std::fabs(loss)) << what << ", step " << step;
    worst_loss = std::max(worst_loss, std::fabs(got.at(step) - loss) / std::fabs(loss));
  }
  const WeightDifference d = weight_difference(run, reference);
  if (tolerances.whole_model)
    EXPECT_LE(d.whole_relative, tolerances.weights) << what << ": final weights differ (whole model)";
  else
    EXPECT_LE(d.max_relative, tolerances.weights) << what << ": final weights differ most in " << d.worst_tensor;
  if (world_comm().rank() == 0)
    std::printf(
        "%s: losses differ by at most %.3g (relative); weights by %.3g (absolute), %.3g (relative L2, %s), "
        "%.3g (relative L2, whole model)\n",
        what.c_str(), worst_loss, d.max_abs, d.max_relative, d.worst_tensor.c_str(), d.whole_relative);
}

}  // namespace primer::test
