// The Priming pipeline end to end on the CPU, through the same entry points as the CLI: a small Qwen3 teacher is
// trained, its layers are scored (layer selection), Stage 0 turns the less important half into GDN (fused), Stage 1
// (stage: hkd) trains only the students to match the teacher (the distillation loss falls, every non-student weight
// stays bit for bit), unfuse drops the teacher, and Stage 2 trains the standalone hybrid on cross-entropy.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "core/io/json.h"
#include "layers/decoder_lm.h"
#include "layers/hf_checkpoint.h"
#include "recipes/hf_transfer.h"
#include "recipes/hybrid_patterns.h"
#include "recipes/layer_selection.h"
#include "recipes/prime_init.h"
#include "recipes/trainer.h"
#include "recipes/unfuse.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

namespace fs = std::filesystem;

// Every metrics record that has `key`, in file order.
std::vector<double> series(const std::string& metrics, const std::string& key) {
  std::vector<double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const json::Value v = json::parse(line, metrics);
    if (const json::Value* x = v.as_object().find(key)) out.push_back(x->as_double());
  }
  return out;
}

std::string common_keys(const std::string& out_dir, int64_t steps) {
  return "dataset: " PRIMER_SOURCE_DIR
         "/README.md\ncutoff_len: 32\nper_device_train_batch_size: 4\n"
         "learning_rate: 3.0e-3\nlr_scheduler_type: constant_with_warmup\nwarmup_steps: 2\nmax_steps: " +
         std::to_string(steps) +
         "\nlogging_steps: 5\neval_steps: 0\neval_batches: 2\nsave_steps: 0\ndevice: cpu\n"
         "output_dir: " +
         out_dir + "\n";
}

ParameterRegistry load(const std::string& dir, std::unique_ptr<layers::DecoderLM>& model) {
  ParameterRegistry params;
  model = std::make_unique<layers::DecoderLM>(load_hf_config(dir + "/config.json"), params);
  params.materialize(Device::cpu(), DType::F32, 0);
  layers::load_hf_weights(dir, params);
  return params;
}

TEST(PrimingPipeline, TeacherThenStage0Stage1UnfuseStage2) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string root = testing::TempDir() + "/primer-pipeline-" + std::to_string(seed);
  fs::create_directories(root);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(root + "/" + name) << text;
    return root + "/" + name;
  };

  // The teacher: a small Qwen3 trained on the README's bytes.
  ASSERT_EQ(recipes::run_train(
                write("teacher.yaml",
                      "model_config: {model_type: qwen3, vocab_size: 256, hidden_size: 32, intermediate_size: 64,\n"
                      "  num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8,\n"
                      "  max_position_embeddings: 64, tie_word_embeddings: true, torch_dtype: float32}\n" +
                          common_keys(root + "/teacher", 30)),
                {}),
            0);

  // Layer selection: each layer windowed alone; then Stage 0 converts the less important half to Gated DeltaNet
  // next to the teacher's attention.
  recipes::SelectLayersOptions select;
  select.window = 4;
  select.mixer = "GDN";
  ASSERT_EQ(recipes::run_select_layers(
                write("select.yaml", "model_name_or_path: " + root + "/teacher\n" + common_keys(root + "/select", 1)),
                {}, select),
            0);
  const std::vector<double> importance = recipes::read_importance_csv(root + "/select/layer_importance.csv");
  ASSERT_EQ(importance.size(), 2u);
  ASSERT_EQ(recipes::run_prime_init(
                write("stage0.yaml", "base_model_name_or_path: " + root + "/teacher\n" + "output_dir: " + root +
                                         "/stage0\nhybrid_ratio: 0.5\n"
                                         "ssm_mixer: GDN\nimportance_scores: " +
                                         root + "/select/layer_importance.csv\ndtype: fp32\n"),
                {}),
            0);
  const std::string expected = importance[1] < importance[0] ? "*-GDN" : "GDN-*";
  EXPECT_EQ(format_hybrid_pattern(load_hf_config(root + "/stage0/config.json").layer_types), expected);

  // Stage 1: only the GDN parameters train, on the end-to-end MSE.
  ASSERT_EQ(
      recipes::run_train(write("stage1.yaml", "model_name_or_path: " + root + "/stage0\nstage: hkd\n" +
                                                  "hybrid_learnable_params: gdn\n" + common_keys(root + "/stage1", 30)),
                         {}),
      0);
  const std::vector<double> mse = series(root + "/stage1/metrics.jsonl", "eval_distill_mse");
  ASSERT_EQ(mse.size(), 2u);
  EXPECT_LT(mse[1], 0.7 * mse[0]) << "held-out distillation MSE " << mse[0] << " → " << mse[1];
  std::unique_ptr<layers::DecoderLM> m0, m1;
  ParameterRegistry p0 = load(root + "/stage0", m0), p1 = load(root + "/stage1", m1);
  int64_t moved = 0;
  for (Parameter* p : p1.all()) {
    const bool student = p->name.find(".gdn.") != std::string::npos;
    const double diff = test::compare(p->master, p0.get(p->name).master).max_abs;
    if (student)
      moved += diff > 0;
    else
      EXPECT_EQ(diff, 0) << p->name << " is not a student parameter but changed in Stage 1";
  }
  EXPECT_GT(moved, 5);

  // Unfuse, then Stage 2 on cross-entropy with every parameter trainable.
  ASSERT_EQ(recipes::run_unfuse(root + "/stage1", root + "/hybrid"), 0);
  EXPECT_EQ(format_hybrid_pattern(load_hf_config(root + "/hybrid/config.json").layer_types), expected);
  ASSERT_EQ(
      recipes::run_train(
          write("stage2.yaml", "model_name_or_path: " + root + "/hybrid\n" + common_keys(root + "/stage2", 40)), {}),
      0);
  const std::vector<double> ppl = series(root + "/stage2/metrics.jsonl", "eval_perplexity");
  ASSERT_EQ(ppl.size(), 2u);
  EXPECT_LT(ppl[1], ppl[0]);
  fs::remove_all(root);
}

// export: a training checkpoint becomes the same Hugging Face directory the run wrote at its end; import: a hybrid
// checkpoint is checked and rewritten, and computes the same function.
TEST(PrimingPipeline, ExportAndImportRoundTrip) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string root = testing::TempDir() + "/primer-export-" + std::to_string(seed);
  fs::create_directories(root);
  const std::string recipe = root + "/run.yaml";
  std::ofstream(recipe)
      << "model_config: {model_type: hybrid_qwen3, vocab_size: 256, hidden_size: 32,"
         " intermediate_size: 64, num_hidden_layers: 4, num_attention_heads: 4, num_key_value_heads: 2,"
         " head_dim: 8, max_position_embeddings: 64, tie_word_embeddings: true, torch_dtype: float32,"
         " hybrid_override_pattern: '*-GKA-GDN-M2'}\n"
      << common_keys(root + "/out", 4);
  ASSERT_EQ(recipes::run_train(recipe, {"save_steps=4"}), 0);
  ASSERT_EQ(recipes::run_export(recipe, {}, "latest", root + "/exported", DType::F32), 0);
  std::unique_ptr<layers::DecoderLM> trained, exported;
  ParameterRegistry a = load(root + "/out", trained), b = load(root + "/exported", exported);
  for (Parameter* p : a.all()) test::expect_close(b.get(p->name).master, p->master, 0, 0, p->name);

  ASSERT_EQ(recipes::run_import(root + "/out", root + "/imported", DType::BF16), 0);
  const ModelConfig imported = load_hf_config(root + "/imported/config.json");
  EXPECT_EQ(format_hybrid_pattern(imported.layer_types), "*-GKA-GDN-M2");
  EXPECT_EQ(imported.torch_dtype, DType::BF16);
  std::unique_ptr<layers::DecoderLM> m;
  ParameterRegistry c = load(root + "/imported", m);
  for (Parameter* p : a.all()) {
    // One rounding to bf16: at most 2^-9 relative per element (rel L2 ≤ 2e-3), so |error| ≤ max|w| / 512.
    const double max_w = test::compare(p->master, Tensor::zeros(p->shape, DType::F32)).max_abs;
    test::expect_close(c.get(p->name).master, p->master, 4e-3, max_w / 256, p->name);
  }

  // export --checkpoint is named as such in its errors (they said "resume_from"); import refuses NaN/inf weights,
  // naming the tensor (it rewrote them).
  test::expect_error([&] { recipes::run_export(recipe, {}, root + "/nowhere", root + "/x", DType::F32); },
                     {"export --checkpoint '" + root + "/nowhere': no such checkpoint directory"});
  const std::string poisoned = a.all().back()->name;
  a.get(poisoned).master.slice(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
  fs::create_directories(root + "/poisoned");
  layers::export_hf(root + "/poisoned", load_hf_config(root + "/out/config.json"), a, DType::F32);
  test::expect_error([&] { recipes::run_import(root + "/poisoned", root + "/imported2", DType::BF16); },
                     {"tensor '" + poisoned + "' holds 1 NaN or inf values (the first at element 0)"});
  EXPECT_FALSE(fs::exists(root + "/imported2/config.json"));
  fs::remove_all(root);
}

TEST(PrimingPipeline, Stage1RefusesAModelThatIsNotFused) {
  const std::string root = testing::TempDir() + "/primer-hkd-" + std::to_string(test::fresh_seed());
  fs::create_directories(root);
  const std::string recipe = root + "/stage1.yaml";
  std::ofstream(recipe) << "model_config: {model_type: qwen3, vocab_size: 256, hidden_size: 32, intermediate_size: 64,"
                           " num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8,"
                           " max_position_embeddings: 64}\nstage: hkd\n"
                        << common_keys(root + "/out", 2);
  test::expect_error([&] { recipes::run_train(recipe, {}); }, {"stage hkd", "fused", "prime-init"});
  fs::remove_all(root);
}

}  // namespace
}  // namespace primer
