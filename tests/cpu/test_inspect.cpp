// `primer inspect`: what a run directory, a checkpoint, a Hugging Face export and tokenized data hold, on artifacts a
// tiny CPU training run and the token-data helper write; --verify finds a flipped byte and NaNs; paths that are none
// of these are named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/io/safetensors.h"
#include "recipes/inspect.h"
#include "recipes/trainer.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"
#include "tests/support/token_data.h"

namespace primer {
namespace {
namespace fs = std::filesystem;

const json::Value& at(const json::Value& v, const std::string& key) {
  const json::Value* found = v.as_object().find(key);
  if (!found) throw std::runtime_error("the report has no '" + key + "': " + json::dump(v));
  return *found;
}

// Trains the tiny Qwen3 two steps with a checkpoint after each; output_dir is <root>/out (with its HF export).
std::string train_tiny_run(const test::ScratchDir& root) {
  const std::string recipe = root / "run.yaml";
  std::ofstream(recipe)
      << "model_config: {model_type: qwen3, vocab_size: 256, hidden_size: 32, intermediate_size: 64,\n"
         "  num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8,\n"
         "  max_position_embeddings: 64, tie_word_embeddings: true}\n"
         "dataset: " PRIMER_SOURCE_DIR
         "/README.md\n"
         "cutoff_len: 32\nper_device_train_batch_size: 2\nmax_steps: 2\nsave_steps: 1\n"
         "logging_steps: 1\neval_batches: 1\ndevice: cpu\noutput_dir: "
      << root / "out"
      << "\n";
  EXPECT_EQ(recipes::run_train(recipe, {}), 0);
  return root / "out";
}

void flip_byte(const std::string& path, uint64_t seed) {
  const uint64_t size = fs::file_size(path);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  const auto where = std::streamoff(size / 4 + seed % (size / 2));
  f.seekg(where);
  const char byte = char(f.get() ^ (1 << (seed % 8)));
  f.seekp(where);
  f.put(byte);
}

size_t problems_of(const json::Value& section) { return at(at(section, "verify"), "problems").as_array().size(); }

TEST(Inspect, RunDirectoryCheckpointsAndExportAreDescribed) {
  const test::ScratchDir root("inspect-run", test::fresh_seed());
  const std::string run = train_tiny_run(root);
  const json::Value r = recipes::inspect_path(run, true);
  EXPECT_EQ(at(r, "kind").as_string(), "run directory");
  const json::Array& checkpoints = at(r, "checkpoints").as_array();
  ASSERT_EQ(checkpoints.size(), 2u);
  EXPECT_EQ(at(checkpoints[1], "state").as_string(), "complete");
  const json::Value& newest = at(r, "newest_checkpoint");
  EXPECT_EQ(at(newest, "step").as_int(), 2);
  EXPECT_EQ(at(newest, "world_size").as_int(), 1);
  EXPECT_EQ(at(newest, "adamw_steps").as_int(), 2);
  const json::Value& params = at(newest, "parameters");
  EXPECT_EQ(at(params, "count").as_int(), 26816);  // the tiny Qwen3 with tied embeddings
  EXPECT_EQ(at(params, "trainable").as_int(), 26816);
  const json::Value& embed = at(params, "tensors").as_array().front();
  EXPECT_EQ(at(embed, "name").as_string(), "model.embed_tokens.weight");
  EXPECT_EQ(json::dump(at(embed, "shape")), "[256,32]");
  EXPECT_TRUE(at(embed, "trainable").as_bool());
  EXPECT_NE(at(newest, "resolved_recipe").as_string().find("max_steps: 2"), std::string::npos);
  EXPECT_GT(at(at(newest, "data_cursor"), "byte_corpus_rows").as_int(), 0);
  EXPECT_EQ(problems_of(newest), 0u);
  EXPECT_EQ(problems_of(r), 0u);
  const json::Value& hf = at(r, "hugging_face_model");
  EXPECT_EQ(at(at(hf, "model"), "name").as_string(), "qwen3");
  EXPECT_EQ(at(at(hf, "parameters"), "count").as_int(), 26816);
  EXPECT_EQ(at(at(at(hf, "verify"), "checked"), "tensors scanned for NaN/inf").as_int(), 24);

  const json::Value one = recipes::inspect_path(run + "/checkpoint-1", false);
  EXPECT_EQ(at(one, "kind").as_string(), "training checkpoint");
  EXPECT_EQ(at(one, "step").as_int(), 1);
  EXPECT_FALSE(one.as_object().contains("verify"));
  EXPECT_EQ(recipes::run_inspect(run, true, false), 0);
}

// A flipped byte fails the file's CRC32C (and a chunk's Fletcher32); a NaN in a Hugging Face tensor is counted and
// named; both make `inspect --verify` an error after the report.
TEST(Inspect, VerifyFindsACorruptedCheckpointAndNaNs) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const test::ScratchDir root("inspect-verify", seed);
  const std::string run = train_tiny_run(root);
  flip_byte(run + "/checkpoint-1/rank00000.h5", seed);
  const json::Value r = recipes::inspect_path(run, true);
  const std::string problems = json::dump(at(at(r, "verify"), "problems"));
  EXPECT_NE(problems.find("rank00000.h5' is corrupted"), std::string::npos) << problems;
  EXPECT_EQ(problems_of(at(r, "newest_checkpoint")), 0u);  // checkpoint-2 is intact
  test::expect_error([&] { recipes::run_inspect(run, true, true); }, {"inspect --verify:", "problem", run});
  EXPECT_EQ(recipes::run_inspect(run, false, false), 0);  // without --verify nothing is read that could fail

  const std::string hf = root / "hf";
  fs::create_directories(hf);
  fs::copy_file(run + "/config.json", hf + "/config.json");
  std::vector<std::pair<std::string, Tensor>> tensors;
  const io::SafetensorsCheckpoint exported(run);
  for (const std::string& name : exported.names()) tensors.emplace_back(name, exported.load(name, DType::F32));
  tensors[3].second.data<float>()[5] = std::nanf("");
  io::write_safetensors(hf, tensors);
  const json::Value nan = recipes::inspect_path(hf, true);
  EXPECT_EQ(at(nan, "kind").as_string(), "Hugging Face model");
  EXPECT_EQ(at(at(nan, "verify"), "nonfinite_values").as_int(), 1);
  EXPECT_NE(json::dump(at(at(nan, "verify"), "problems")).find(tensors[3].first), std::string::npos);
}

TEST(Inspect, TokenizedDataIsDescribedAndVerified) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const test::ScratchDir root("inspect-tokens", seed);
  std::vector<test::SyntheticDoc> docs(40);
  for (size_t i = 0; i < docs.size(); ++i) {
    docs[i].tokens.assign(5 + i % 7, int32_t(i));
    docs[i].source = int32_t(i % 2);
  }
  const data::TokenManifest written = test::write_token_data(root / "tokens", docs, 2, 60);
  const json::Value r = recipes::inspect_path(root / "tokens", true);
  EXPECT_EQ(at(r, "kind").as_string(), "tokenized data");
  EXPECT_EQ(at(r, "documents").as_int(), 40);
  EXPECT_EQ(at(r, "tokens").as_int(), written.tokens());
  EXPECT_EQ(at(r, "sources").as_array().size(), 2u);
  EXPECT_EQ(at(r, "shards").as_array().size(), written.shards.size());
  EXPECT_EQ(problems_of(r), 0u);
  flip_byte(root / "tokens" + "/" + written.shards.front().name, seed);
  const std::string problems = json::dump(at(at(recipes::inspect_path(root / "tokens", true), "verify"), "problems"));
  EXPECT_NE(problems.find(written.shards.front().name), std::string::npos) << problems;
}

TEST(Inspect, PathsThatAreNoneOfTheseAreNamed) {
  const test::ScratchDir root("inspect-none", test::fresh_seed());
  test::expect_error([&] { recipes::inspect_path(root / "absent", false); }, {"absent' does not exist"});
  std::ofstream(root / "file.txt") << "text";
  test::expect_error([&] { recipes::inspect_path(root / "file.txt", false); },
                     {"file.txt' is a file", "expected a run directory"});
  test::expect_error([&] { recipes::inspect_path(root.path.string(), false); },
                     {"holds none of what inspect reads", "Hugging Face model"});
  fs::create_directories(root / "other");
  std::ofstream(root / "other/manifest.json") << R"({"format": "something-else"})";
  test::expect_error([&] { recipes::inspect_path(root / "other", false); }, {"format 'something-else'"});
}

}  // namespace
}  // namespace primer
