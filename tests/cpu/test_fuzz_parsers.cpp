// Every parser of user input under a seeded mutation loop: a valid input is mutated (bytes flipped, inserted,
// deleted, duplicated, truncated, or spliced with tokens that parsers trip on) and parsed again, thousands of times.
// Each run must end normally or with primer::Error; any other exception fails the test, and a crash or hang fails
// it through CTest. The YAML recipe loader, JSON, safetensors (header and data ranges), tokenizer.json, checkpoint
// and token manifests, Hugging Face config.json, and token shards are covered.
// PRIMER_FUZZ_ITERATIONS scales the loop (default 1: ~2,000 text inputs and ~200 file inputs per parser, a few
// seconds in all); PRIMER_TEST_SEED picks the seed (printed on failure).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>

#include "core/check.h"
#include "core/config/config.h"
#include "core/io/json.h"
#include "core/io/safetensors.h"
#include "core/rng.h"
#include "data/token_corpus.h"
#include "data/token_manifest.h"
#include "layers/model_config.h"
#include "recipes/checkpoint_manifest.h"
#include "recipes/train_schema.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_tokenizer.h"
#include "tests/support/token_data.h"

namespace primer {
namespace {

int scale() {
  const char* v = std::getenv("PRIMER_FUZZ_ITERATIONS");
  return v ? std::max(1, std::atoi(v)) : 1;
}

// Tokens that break naive parsers: structure, escapes, huge or odd numbers, YAML indicators, invalid UTF-8, and ""
// for a NUL byte (the splice inserts one for it; a pointer into a temporary std::string("\0", 1) dangled).
const char* const kSplices[] = {"{",   "}",    "[",       "]",   "\"",    ":",    ",",
                                "\\",  "\\u",  "\\ud800", "-1",  "1e309", "-0",   "99999999999999999999999",
                                "nan", "null", "true",    "\n",  "  ",    "- ",   "&a",
                                "*a",  "!!",   "%",       "#",   "\xff",  "\xc3", "",
                                "\t",  "'",    "0x",      "<<: "};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : seed_(seed) {}

  std::string operator()(const std::string& input) {
    std::string s = input;
    const int edits = 1 + int(next() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = s.empty() ? 0 : size_t(next() % s.size());
      switch (next() % 6) {
        case 0:  // flip a byte
          if (!s.empty()) s[at] = char(uint8_t(s[at]) ^ uint8_t(1u << (next() % 8)));
          break;
        case 1:  // insert a random byte
          s.insert(s.begin() + std::ptrdiff_t(at), char(next() % 256));
          break;
        case 2:  // delete a range
          s.erase(at, size_t(next() % 16));
          break;
        case 3: {  // duplicate a range
          const std::string piece = s.substr(at, size_t(next() % 32));
          s.insert(at, piece);
          break;
        }
        case 4:  // truncate
          s.resize(at);
          break;
        default: {  // splice a troublesome token
          const std::string token = kSplices[next() % std::size(kSplices)];
          s.insert(at, token.empty() ? std::string(1, '\0') : token);
        }
      }
    }
    return s;
  }

 private:
  uint64_t next() { return uint64_t(uniform01(seed_, counter_++) * 4294967296.0); }
  uint64_t seed_, counter_ = 0;
};

// Runs parse(mutated input) `iterations` times: only primer::Error may escape.
void fuzz(const std::string& what, const std::string& valid, int iterations,
          const std::function<void(const std::string&)>& parse) {
  const uint64_t seed = test::fresh_seed();
  Mutator mutate(seed);
  parse(valid);  // the seed input itself is valid
  int errors = 0;
  for (int i = 0; i < iterations * scale(); ++i) {
    const std::string input = mutate(valid);
    try {
      parse(input);
    } catch (const Error&) {
      ++errors;
    } catch (const std::exception& e) {
      FAIL() << what << ": mutation " << i << " (PRIMER_TEST_SEED=" << seed
             << ") escaped as a non-primer exception: " << e.what();
    }
  }
  EXPECT_GT(errors, 0) << what << ": no mutation was refused; the loop is not reaching the parser";
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

TEST(FuzzParsers, Json) {
  const std::string valid = R"({"a": [1, 2.5e3, -0.0, true, null, "x\u00e9\n"], "b": {"c": "d", "e": [[], {}]}})";
  fuzz("json", valid, 4000, [](const std::string& text) { json::parse(text, "fuzz.json"); });
}

TEST(FuzzParsers, HuggingFaceConfig) {
  const std::string valid =
      R"({"model_type": "qwen3", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "max_position_embeddings": 64, "rope_theta": 10000.0, "tie_word_embeddings": true,
          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 32}})";
  fuzz("config.json", valid, 2000,
       [](const std::string& text) { from_hf_json(json::parse(text, "config.json"), "config.json"); });
}

TEST(FuzzParsers, RecipeYaml) {
  test::tiny::ScratchDir dir("fuzz-yaml");
  const std::string valid =
      "model_config: {model_type: qwen3, vocab_size: 256, hidden_size: 32, intermediate_size: 64,\n"
      "  num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8}\n"
      "dataset: README.md\ncutoff_len: 32\nper_device_train_batch_size: 2\nlearning_rate: 3.0e-3\n"
      "lr_scheduler_type: cosine\nmax_steps: 3\nsave_steps: 2\noutput_dir: out\n"
      "hybrid_learnable_params: [gka, gdn]\n";
  const std::string path = (dir.path / "run.yaml").string();
  fuzz("recipe YAML", valid, 1500, [&](const std::string& text) {
    write_bytes(path, text);
    config::load_config(path, recipes::train_schema());
  });
}

TEST(FuzzParsers, Safetensors) {
  test::tiny::ScratchDir dir("fuzz-safetensors");
  io::write_safetensors(dir.path.string(), {{"a.weight", test::randn({3, 4}, 1)}, {"b", test::randn({5}, 2)}});
  const std::string valid = read_bytes((dir.path / "model.safetensors").string());
  const std::string path = (dir.path / "mutated.safetensors").string();
  fuzz("safetensors", valid, 600, [&](const std::string& bytes) {
    write_bytes(path, bytes);
    io::SafetensorsFile file(path);
    for (const std::string& name : file.names()) file.load(name, DType::F32);
  });
}

TEST(FuzzParsers, TokenizerJson) {
  test::tiny::ScratchDir dir("fuzz-tokenizer");
  const std::string valid = json::dump(test::tiny::tokenizer_json({}));
  const std::string path = (dir.path / "tokenizer.json").string();
  fuzz("tokenizer.json", valid, 400, [&](const std::string& text) {
    write_bytes(path, text);
    data::Tokenizer::load(path).encode("hello world <|im_end|> \xff");
  });
}

TEST(FuzzParsers, CheckpointManifest) {
  recipes::Manifest m;
  m.step = 12;
  m.world_size = 2;
  m.files = {{"rank00000.h5", 0, 1234, 99}, {"rank00001.h5", 1, 1234, 7}};
  m.parameters = {{"model.embed_tokens.weight", {256, 32}, true}, {"model.norm.weight", {32}, false}};
  fuzz("checkpoint manifest", recipes::manifest_to_json(m), 3000,
       [](const std::string& text) { recipes::parse_manifest(text, "manifest.json"); });
}

TEST(FuzzParsers, TokenManifestAndShards) {
  test::tiny::ScratchDir dir("fuzz-shards");
  std::vector<test::SyntheticDoc> docs;
  for (int d = 0; d < 6; ++d) docs.push_back({std::vector<int32_t>(size_t(5 + 3 * d), 7 + d), {}, d % 2});
  const std::string data_dir = (dir.path / "data").string();
  const data::TokenManifest manifest = test::write_token_data(data_dir, docs, 2, 16);
  const std::string manifest_text = read_bytes(data_dir + "/manifest.json");
  fuzz("token manifest", manifest_text, 2000,
       [](const std::string& text) { data::TokenManifest::parse(text, "manifest.json"); });
  // The shards as read for training (verify: every CRC32C): mutate the first shard's bytes.
  const std::string shard = data_dir + "/" + manifest.shards.front().name;
  const std::string shard_bytes = read_bytes(shard);
  fuzz("token shard", shard_bytes, 200, [&](const std::string& bytes) {
    write_bytes(shard, bytes);
    data::TokenCorpus::open({data_dir}, true);
  });
  write_bytes(shard, shard_bytes);
}

}  // namespace
}  // namespace primer
