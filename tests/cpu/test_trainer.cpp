// `primer train` end to end on the CPU: a recipe trains, checkpoints, and a run resumed from a mid-run
// checkpoint reproduces the uninterrupted run's losses bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "core/io/json.h"
#include "core/process.h"
#include "recipes/metrics_plot.h"
#include "recipes/run_directory.h"
#include "recipes/trainer.h"
#include "tests/support/test_util.h"
#include "tests/support/token_data.h"
#include "tests/support/xml_check.h"

namespace primer {
namespace {

// data: the recipe's data keys (default: the README as bytes).
std::string write_recipe(const std::string& dir, uint64_t seed,
                         const std::string& data = "dataset: " PRIMER_SOURCE_DIR "/README.md\n") {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/run.yaml";
  std::ofstream(path) << "model_config: {model_type: qwen3, vocab_size: 256, hidden_size: 32, intermediate_size: 64,\n"
                         "  num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8,\n"
                         "  max_position_embeddings: 64, tie_word_embeddings: true}\n"
                      << data
                      << "cutoff_len: 32\nper_device_train_batch_size: 4\ngradient_accumulation_steps: 2\n"
                         "learning_rate: 3.0e-3\nwarmup_steps: 2\nmax_steps: 6\nlogging_steps: 1\neval_steps: 0\n"
                         "eval_batches: 2\nsave_steps: 3\ndevice: cpu\nresume_from_checkpoint: auto\n"
                      << "seed: " << (seed % 100000) << "\noutput_dir: " << dir << "/out\n";
  return path;
}

// Training losses by step, from the metrics file (later lines win: a resumed run appends).
std::map<int64_t, double> losses(const std::string& metrics) {
  std::map<int64_t, double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const json::Value v = json::parse(line, metrics);
    if (v.as_object().contains("loss"))
      out[v.as_object().find("step")->as_int()] = v.as_object().find("loss")->as_double();
  }
  return out;
}

void expect_resume_reproduces_losses(const std::string& root, const std::string& recipe) {
  ASSERT_EQ(recipes::run_train(recipe, {}), 0);
  const auto straight = losses(root + "/out/metrics.jsonl");
  ASSERT_EQ(straight.size(), 6u);
  EXPECT_LT(straight.at(6), straight.at(1));
  EXPECT_TRUE(std::filesystem::exists(root + "/out/resolved_config.yaml"));

  // Lose the final checkpoint: `resume_from_checkpoint: auto` restarts from step 3.
  std::filesystem::remove_all(root + "/out/checkpoint-6");
  ASSERT_EQ(recipes::run_train(recipe, {}), 0);
  const auto resumed = losses(root + "/out/metrics.jsonl");
  for (int64_t step = 1; step <= 6; ++step) EXPECT_EQ(resumed.at(step), straight.at(step)) << "step " << step;
  // The rows the first run wrote after step 3 were replaced, not appended to: every step's training row and
  // evaluation row appears once (a plot draws one curve).
  std::map<std::pair<int64_t, bool>, int> rows;
  std::ifstream in(root + "/out/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json::Value v = json::parse(line, "metrics.jsonl");
    ++rows[{v.as_object().find("step")->as_int(), v.as_object().contains("eval_loss")}];
  }
  for (const auto& [key, count] : rows)
    EXPECT_EQ(count, 1) << (key.second ? "evaluation" : "training") << " row of step " << key.first;
  EXPECT_EQ(rows.count({6, false}), 1u);
  std::filesystem::remove_all(root);
}

TEST(Trainer, ResumedRunReproducesTheUninterruptedLosses) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string root = testing::TempDir() + "/primer-trainer-" + std::to_string(seed);
  expect_resume_reproduces_losses(root, write_recipe(root, seed));
}

// The same on tokenized shards: two sources mixed by weight, SFT-style masks, greedy packing; the loader's cursor
// goes through the checkpoint.
TEST(Trainer, ResumedRunOnTokenizedDataReproducesTheUninterruptedLosses) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string root = testing::TempDir() + "/primer-trainer-tok-" + std::to_string(seed);
  std::mt19937_64 rng(seed);
  std::vector<test::SyntheticDoc> docs(120);
  for (test::SyntheticDoc& d : docs) {
    d.source = int32_t(rng() % 2);
    d.tokens.resize(size_t(4 + rng() % (d.source ? 60 : 20)));
    const int32_t start = int32_t(rng() % 255);  // counting sequences: learnable within a few steps
    for (size_t i = 0; i < d.tokens.size(); ++i) d.tokens[i] = int32_t((start + int32_t(i)) % 255);
    d.mask.resize(d.tokens.size());
    for (size_t i = 0; i < d.mask.size(); ++i) d.mask[i] = i >= d.mask.size() / 3;  // a "prompt" without loss
  }
  test::write_token_data(root + "/tokens", docs, 2, 1000, test::synthetic_tokenizer(256));
  expect_resume_reproduces_losses(
      root,
      write_recipe(root, seed,
                   "tokenized_path: " + root +
                       "/tokens\nstage: sft\npacking: true\nval_size: 0.2\n"
                       "mix_strategy: interleave_over\ninterleave_probs: 0.4,0.6\nlength_weighted_sampling: true\n"));
}

TEST(Trainer, RecipeErrorsNameTheFileAndKey) {
  const std::string root = testing::TempDir() + "/primer-trainer-bad-" + std::to_string(test::fresh_seed());
  const std::string recipe = write_recipe(root, 1);
  try {
    recipes::run_train(recipe, {"learnig_rate=1e-3"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'learning_rate'"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(root);
}

// A resume whose recipe describes another run (here: another sequence length) is refused naming the key with its old
// and new values, before anything is written; resume_allow_changes lets it through; a learning-rate change is only
// reported. (Before, only the seed was compared: the run continued silently.)
TEST(Trainer, ResumeRefusesARecipeThatChangedTheRun) {
  const std::string root = testing::TempDir() + "/primer-trainer-resume-" + std::to_string(test::fresh_seed());
  const std::string recipe = write_recipe(root, 1);
  ASSERT_EQ(recipes::run_train(recipe, {"max_steps=3"}), 0);
  test::expect_error([&] { recipes::run_train(recipe, {"cutoff_len=16"}); },
                     {"checkpoint-3", "cutoff_len: 32 -> 16", "resume_allow_changes"});
  EXPECT_EQ(losses(root + "/out/metrics.jsonl").size(), 3u) << "the refused run wrote metrics";
  std::ifstream resolved(root + "/out/resolved_config.yaml");
  const std::string resolved_text((std::istreambuf_iterator<char>(resolved)), std::istreambuf_iterator<char>());
  EXPECT_NE(resolved_text.find("cutoff_len: 32"), std::string::npos) << "the refused run replaced resolved_config.yaml";
  EXPECT_EQ(recipes::run_train(recipe, {"learning_rate=1e-3", "max_steps=4"}), 0);
  EXPECT_EQ(recipes::run_train(recipe, {"cutoff_len=16", "resume_allow_changes=[cutoff_len]", "max_steps=5"}), 0);
  EXPECT_EQ(losses(root + "/out/metrics.jsonl").size(), 5u);
  std::filesystem::remove_all(root);
}

// A preempted run (SIGTERM, here raised by the fault hook in step 2) finishes the step, commits a checkpoint and
// exits 143; resuming from it reproduces the uninterrupted run's losses.
TEST(Trainer, SigtermCommitsACheckpointAndResumeContinues) {
  const std::string root = testing::TempDir() + "/primer-trainer-term-" + std::to_string(test::fresh_seed());
  const std::string recipe = write_recipe(root, 7);
  ASSERT_EQ(recipes::run_train(recipe, {"output_dir=" + root + "/straight"}), 0);
  const auto straight = losses(root + "/straight/metrics.jsonl");
  ::setenv("PRIMER_FAULT", "0:step:2:term", 1);
  const int code = recipes::run_train(recipe, {});
  ::unsetenv("PRIMER_FAULT");
  EXPECT_EQ(code, 128 + SIGTERM);
  EXPECT_TRUE(std::filesystem::exists(root + "/out/checkpoint-2")) << "no checkpoint at the interrupted step";
  EXPECT_EQ(losses(root + "/out/metrics.jsonl").size(), 2u);
  ASSERT_EQ(recipes::run_train(recipe, {}), 0);
  const auto resumed = losses(root + "/out/metrics.jsonl");
  for (int64_t step = 1; step <= 6; ++step) EXPECT_EQ(resumed.at(step), straight.at(step)) << "step " << step;
  std::filesystem::remove_all(root);
}

// Input that would be ignored, and a log that cannot be written, end the run with the file or key named (both ran
// to exit 0 before: the second dataset was never read; metrics went nowhere).
TEST(Trainer, IgnoredDatasetsAndAnUnwritableLogAreErrors) {
  const std::string root = testing::TempDir() + "/primer-trainer-io-" + std::to_string(test::fresh_seed());
  const std::string recipe =
      write_recipe(root, 1, "dataset: [" PRIMER_SOURCE_DIR "/README.md, " PRIMER_SOURCE_DIR "/missing.txt]\n");
  test::expect_error([&] { recipes::run_train(recipe, {}); }, {"dataset lists 2 entries"});
  if (std::filesystem::exists("/dev/full")) {
    const std::string good = write_recipe(root, 1);
    test::expect_error([&] { recipes::run_train(good, {"metrics_file=/dev/full"}); },
                       {"cannot write metrics file '/dev/full'"});
  }
  std::filesystem::remove_all(root);
}

// Too little data is named with its sizes and what to change: an empty corpus (it read as "the held-out part is
// smaller than one batch"), and a held-out part smaller than one evaluation batch.
TEST(Trainer, EmptyCorpusAndASmallHeldOutPartNameTheSizes) {
  const std::string root = testing::TempDir() + "/primer-trainer-small-" + std::to_string(test::fresh_seed());
  std::filesystem::create_directories(root);
  std::ofstream(root + "/empty.txt").close();
  const std::string recipe = write_recipe(root, 1, "dataset: " + root + "/empty.txt\n");
  test::expect_error([&] { recipes::run_train(recipe, {}); }, {"corpus '" + root + "/empty.txt' is empty (0 bytes)"});
  test::expect_error([&] { recipes::run_train(write_recipe(root, 1), {"val_size=0.001"}); },
                     {"the held-out part of " PRIMER_SOURCE_DIR "/README.md (", "bytes: val_size of its",
                      "smaller than one evaluation batch (4 rows of 32 tokens over the ranks: 129 bytes)",
                      "raise val_size, lower per_device_train_batch_size or cutoff_len"});
  std::filesystem::remove_all(root);
}

// Sequence parallelism that cannot be laid out is refused before any work, naming the key: more sequence-parallel
// ranks than the job has, and (on the ranks it would need, checked by the dist tests) a cutoff_len that does not
// split into the layout's chunks; zigzag-ring on the contiguous layout contradicts itself.
TEST(Trainer, SequenceParallelLayoutErrorsNameTheKey) {
  const std::string root = testing::TempDir() + "/primer-trainer-sp-" + std::to_string(test::fresh_seed());
  const std::string recipe = write_recipe(root, 1);
  test::expect_error([&] { recipes::run_train(recipe, {"sequence_parallel_size=2"}); },
                     {"sequence_parallel_size 2 does not divide the 1 ranks of this job"});
  test::expect_error([&] { recipes::run_train(recipe, {"sequence_parallel_layout=contiguous"}); },
                     {"sequence_parallel_mode zigzag-ring runs on the zigzag layout"});
  std::filesystem::remove_all(root);
}

// A fresh run into an output_dir holding another run's checkpoints is refused before anything is written (it would
// have resumed, rotated or exported them as its own), and before the model is built (here a model whose weights
// cannot load: the refusal comes first); overwrite_output_dir removes them and trains, into a fresh metrics file (the
// previous run's kept as metrics.jsonl.previous).
TEST(Trainer, FreshRunRefusesAnotherRunsCheckpointsUnlessOverwrite) {
  const std::string root = testing::TempDir() + "/primer-trainer-fresh-" + std::to_string(test::fresh_seed());
  const std::string recipe = write_recipe(root, 3);
  ASSERT_EQ(recipes::run_train(recipe, {"max_steps=3"}), 0);
  test::expect_error([&] { recipes::run_train(recipe, {"resume_from_checkpoint=null"}); },
                     {"holds checkpoints of another run (checkpoint-3)", "overwrite_output_dir: true"});
  // The run's own config.json without its weights: building this model would fail to load them.
  std::filesystem::create_directories(root + "/no-weights");
  std::filesystem::copy_file(root + "/out/config.json", root + "/no-weights/config.json");
  test::expect_error(
      [&] {
        recipes::run_train(
            recipe, {"resume_from_checkpoint=null", "model_config=null", "model_name_or_path=" + root + "/no-weights"});
      },
      {"holds checkpoints of another run (checkpoint-3)"});
  EXPECT_TRUE(std::filesystem::exists(root + "/out/checkpoint-3"));
  EXPECT_EQ(recipes::run_train(recipe, {"resume_from_checkpoint=null", "overwrite_output_dir=true", "max_steps=2"}), 0);
  EXPECT_FALSE(std::filesystem::exists(root + "/out/checkpoint-3")) << "the previous run's checkpoint was kept";
  EXPECT_TRUE(std::filesystem::exists(root + "/out/checkpoint-2"));
  const auto now = losses(root + "/out/metrics.jsonl"), before = losses(root + "/out/metrics.jsonl.previous");
  EXPECT_EQ(now.size(), 2u) << "the overwritten run's metrics were appended to";
  EXPECT_EQ(before.size(), 3u);
  std::filesystem::remove_all(root);
}

// nan_policy: skip counts skipped steps against nan_skip_limit over the whole run: the count is checkpointed, so a
// resumed run continues it (a NaN step before the checkpoint and one after it are two, past a limit of 1).
TEST(Trainer, SkippedStepCountSurvivesAResume) {
  const std::string root = testing::TempDir() + "/primer-trainer-nan-resume-" + std::to_string(test::fresh_seed());
  const std::string recipe = write_recipe(root, 4);
  const std::vector<std::string> skip{"hybrid_learnable_params=[layers.1.]", "nan_policy=skip", "nan_skip_limit=1"};
  ::setenv("PRIMER_FAULT", "0:step:2:nan", 1);
  std::vector<std::string> first = skip;
  first.push_back("max_steps=3");
  testing::internal::CaptureStdout();
  ASSERT_EQ(recipes::run_train(recipe, first), 0);
  const std::string log = testing::internal::GetCapturedStdout();
  EXPECT_NE(log.find("update skipped (1 of nan_skip_limit 1)"), std::string::npos) << log;
  ASSERT_TRUE(std::filesystem::exists(root + "/out/checkpoint-3"));
  ::setenv("PRIMER_FAULT", "0:step:5:nan", 1);
  test::expect_error([&] { recipes::run_train(recipe, skip); },
                     {"step 5: non-finite gradient", "2 steps had a non-finite gradient, more than nan_skip_limit 1"});
  ::unsetenv("PRIMER_FAULT");
  std::filesystem::remove_all(root);
}

// One run per output_dir: a second run names the lock's holder (host and pid), a lock of another host is never taken
// over, a lock left by a dead process of this host is (with a warning), and a finished run releases its lock.
TEST(Trainer, RunLockNamesItsHolderAndStaleLocksAreTakenOver) {
  const std::string root = testing::TempDir() + "/primer-trainer-lock-" + std::to_string(test::fresh_seed());
  const std::string recipe = write_recipe(root, 5), lock = root + "/out/" + recipes::kRunLockName;
  std::filesystem::create_directories(root + "/out");
  {
    const recipes::RunDirectoryLock held(root + "/out");
    test::expect_error([&] { recipes::run_train(recipe, {}); },
                       {"is in use by another run", fmt::format("process {} on host {}", ::getpid(), host_name())});
  }
  EXPECT_FALSE(std::filesystem::exists(lock)) << "the lock outlived its holder";
  std::ofstream(lock) << "elsewhere.example 4242\n";
  test::expect_error([&] { recipes::run_train(recipe, {}); }, {"process 4242 on host elsewhere.example"});
  std::ofstream(lock) << host_name() << " " << test::dead_pid() << "\n";
  testing::internal::CaptureStderr();
  const int status = recipes::run_train(recipe, {"max_steps=2"});
  const std::string stderr_text = testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, 0);
  EXPECT_NE(stderr_text.find("taking over the run lock"), std::string::npos) << stderr_text;
  EXPECT_FALSE(std::filesystem::exists(lock)) << "a finished run left its lock";
  std::filesystem::remove_all(root);
}

// A typo inside the inline model_config (it would have trained a model without the intended setting) is refused
// naming the recipe line and the nearest key primer reads.
TEST(Trainer, UnknownModelConfigKeyIsNamedWithTheNearest) {
  const std::string root = testing::TempDir() + "/primer-trainer-mc-" + std::to_string(test::fresh_seed());
  const std::string recipe = write_recipe(root, 1);
  test::expect_error(
      [&] {
        recipes::run_train(recipe, {"model_config={model_type: qwen3, vocab_size: 256, hidden_size: 32, "
                                    "intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, "
                                    "max_position_embeddings: 64, rope_scalling: {rope_type: llama3, factor: 8}}"});
      },
      {"--set model_config=", "unknown key 'rope_scalling' in model_config; did you mean 'rope_scaling'?"});
  test::expect_error(
      [&] {
        recipes::run_train(recipe, {"model_config={model_type: qwen3, vocab_size: 256, "
                                    "hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, "
                                    "num_attention_heads: 4, max_position_embeddings: 64, "
                                    "frobnicate: 1}"});
      },
      {"unknown key 'frobnicate' in model_config (it takes the keys of a Hugging Face config.json"});
  std::filesystem::remove_all(root);
}

// A NaN gradient (PRIMER_FAULT's nan, in the last trainable parameter: layer 1's, the only one training) stops the run
// by default, naming the step, the parameter and its layer, with nothing applied or saved at that step; under
// nan_policy: skip the step's update is left out and said so, its loss is not logged, and the run carries on — until
// more steps diverge than nan_skip_limit. (Before, the message said "update skipped" while the run stopped.)
TEST(Trainer, NonFiniteGradientStopsOrIsSkippedByNanPolicy) {
  const std::string root = testing::TempDir() + "/primer-trainer-nan-" + std::to_string(test::fresh_seed());
  const std::string recipe = write_recipe(root, 2);
  const std::string layer1 = "hybrid_learnable_params=[layers.1.]";
  ::setenv("PRIMER_FAULT", "0:step:3:nan", 1);
  test::expect_error([&] { recipes::run_train(recipe, {layer1}); },
                     {"step 3: non-finite gradient (NaN or inf), first in 'model.layers.1.", "(layer 1)",
                      "the update was not applied and the run stops (nan_policy: stop)"});
  EXPECT_FALSE(std::filesystem::exists(root + "/out/checkpoint-3"));
  EXPECT_EQ(losses(root + "/out/metrics.jsonl").size(), 2u);

  testing::internal::CaptureStdout();
  const int status = recipes::run_train(recipe, {layer1, "nan_policy=skip", "output_dir=" + root + "/skip"});
  const std::string log = testing::internal::GetCapturedStdout();
  EXPECT_EQ(status, 0);
  EXPECT_NE(log.find("train step      3 | non-finite gradient (NaN or inf), first in 'model.layers.1."),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("update skipped (1 of nan_skip_limit 10)"), std::string::npos) << log;
  const auto skipped = losses(root + "/skip/metrics.jsonl");
  EXPECT_EQ(skipped.size(), 5u);
  EXPECT_EQ(skipped.count(3), 0u) << "the skipped step's loss was logged";

  test::expect_error(
      [&] {
        recipes::run_train(recipe, {layer1, "nan_policy=skip", "nan_skip_limit=0", "output_dir=" + root + "/limit"});
      },
      {"step 3: non-finite gradient", "1 steps had a non-finite gradient, more than nan_skip_limit 0"});
  ::unsetenv("PRIMER_FAULT");
  std::filesystem::remove_all(root);
}

// Each training line says how long the run has taken and how long it has left (the median recent step times the
// steps left).
TEST(Trainer, StepLinesShowElapsedAndRemainingTime) {
  const std::string root = testing::TempDir() + "/primer-trainer-eta-" + std::to_string(test::fresh_seed());
  testing::internal::CaptureStdout();
  const int status = recipes::run_train(write_recipe(root, 4), {});
  const std::string log = testing::internal::GetCapturedStdout();
  EXPECT_EQ(status, 0);
  const std::regex line(R"(train step +([0-9]+) \|.* \| elapsed [0-9]+s, ETA ([0-9]+)s)");
  int lines = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it, ++lines)
    if ((*it)[1] == "6") {
      EXPECT_EQ((*it)[2], "0") << "the last step has nothing left";
    }
  EXPECT_EQ(lines, 6) << log;
  std::filesystem::remove_all(root);
}

// Two tiny runs drawn on one chart from the metrics.jsonl the loop wrote, against tokens: well-formed SVG, both runs
// named, one line per run in each of the five panels.
TEST(Trainer, TwoRunsPlotOnOneChart) {
  const std::string root = testing::TempDir() + "/primer-trainer-plot-" + std::to_string(test::fresh_seed());
  const std::string recipe = write_recipe(root, 6);
  ASSERT_EQ(recipes::run_train(recipe, {"max_steps=3", "output_dir=" + root + "/a"}), 0);
  ASSERT_EQ(recipes::run_train(recipe, {"max_steps=3", "learning_rate=1e-2", "output_dir=" + root + "/b"}), 0);
  ASSERT_EQ(recipes::run_plot({root + "/a", root + "/b"}, root + "/curves.svg", "tokens"), 0);
  std::ifstream in(root + "/curves.svg");
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const test::XmlCheck xml = test::check_xml(svg);
  ASSERT_EQ(xml.error, "") << svg;
  EXPECT_EQ(xml.elements.at("polyline"), 10);
  EXPECT_NE(xml.text.find(root + "/a"), std::string::npos);
  EXPECT_NE(xml.text.find(root + "/b"), std::string::npos);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace primer
