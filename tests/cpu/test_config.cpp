// Recipe configuration: typed loading, every class of user error with its exact message shape, overrides,
// `base:` inheritance, the resolved-YAML round trip, and the generated docs/recipes.md.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "core/check.h"
#include "core/config/config.h"
#include "recipes/train_schema.h"
#include "tests/support/test_util.h"

namespace primer::config {
namespace {

namespace fs = std::filesystem;
using recipes::train_recipe_reference;
using recipes::train_schema;  // the real recipe schema, for error shapes and the generated docs

// Every field type, a section declared in two places, and each presence kind.
Schema make_test_schema() {
  Schema s;
  s.add_int("steps", "optimizer steps").at_least(1).required();
  s.add_float("lr", "learning rate").above(0).defaults(1e-3);
  s.add_bool("flag", "a switch").defaults(false);
  s.add_string("name", "a name").optional();
  s.add_string_list("tags", "labels").defaults(std::vector<std::string>{});
  s.add_enum("mode", {"alpha", "beta", "gamma"}, "a mode").defaults("alpha");
  s.add_map("extra", "free-form").optional();
  s.add_float("optim.learning_rate", "peak lr").above(0).defaults(0.1);
  s.add_int("model.hidden_size", "width").at_least(1).defaults(64);
  s.add_float("optim.beta", "decay").at_least(0).below(1).defaults(0.9);
  return s;
}

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = test::fresh_seed();
    rng_.seed(seed_);
    dir_ = fs::temp_directory_path() / fmt::format("primer_config_test_{}", seed_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

  int64_t random_int(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  double random_float(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }

  // A train recipe with the required keys, a random step count and `extra` lines appended.
  std::string train_recipe(const std::string& extra = "") {
    return fmt::format("model_name_or_path: models/qwen3\ndataset: corpus\noutput_dir: runs/x\nmax_steps: {}\n{}",
                       random_int(1, 100000), extra);
  }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  fs::path dir_;
};

// The error `fn` throws must begin with `expected` (PRIMER_FAIL appends the source location after it).
void expect_error(const std::function<void()>& fn, const std::string& expected) {
  try {
    fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.substr(0, expected.size()), expected) << "full message: " << msg;
    return;
  }
  ADD_FAILURE() << "expected an error starting with: " << expected;
}

TEST_F(ConfigTest, LoadsEveryTypeAndFillsDefaults) {
  SCOPED_TRACE(seed_);
  int64_t steps = random_int(1, 1 << 30), hidden = random_int(1, 4096);
  double lr = random_float(1e-6, 1.0);
  std::string path = write("run.yaml", fmt::format(R"(steps: {}
lr: {}
flag: true
name: "hello world"
tags: [a, "b c"]
mode: gamma
extra:
  hidden_size: {}
  model_type: qwen3
  rope: {{theta: 1e6, scaling: null}}
  quoted: "12"
optim:
  beta: 0.5
model.hidden_size: {}
)",
                                                   steps, lr, hidden, hidden));
  Config cfg = load_config(path, make_test_schema(), {});
  EXPECT_EQ(cfg.get_int("steps"), steps);
  EXPECT_DOUBLE_EQ(cfg.get_float("lr"), lr);
  EXPECT_TRUE(cfg.get_bool("flag"));
  EXPECT_EQ(cfg.get_string("name"), "hello world");
  EXPECT_EQ(cfg.get_list("tags"), (std::vector<std::string>{"a", "b c"}));
  EXPECT_EQ(cfg.get_string("mode"), "gamma");
  EXPECT_EQ(
      cfg.get_map_json("extra"),
      fmt::format(R"({{"hidden_size": {}, "model_type": "qwen3", "rope": {{"theta": 1000000.0, "scaling": null}}, )"
                  R"("quoted": "12"}})",
                  hidden));
  EXPECT_DOUBLE_EQ(cfg.get_float("optim.beta"), 0.5);
  EXPECT_DOUBLE_EQ(cfg.get_float("optim.learning_rate"), 0.1);  // default
  EXPECT_EQ(cfg.get_int("model.hidden_size"), hidden);          // dotted key at the top level
  EXPECT_EQ(cfg.where("steps"), path + ":1");
  EXPECT_EQ(cfg.where("optim.learning_rate"), "default");
}

TEST_F(ConfigTest, UnknownKeySuggestsTheClosestKey) {
  SCOPED_TRACE(seed_);
  std::string path = write("run.yaml", train_recipe("seed: 3\nlearnig_rate: 1e-4\n"));
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":6: unknown key 'learnig_rate'; did you mean 'learning_rate'?");
  path = write("run2.yaml", train_recipe("lr_schedular_type: cosine\n"));
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":5: unknown key 'lr_schedular_type'; did you mean 'lr_scheduler_type'?");
}

TEST_F(ConfigTest, UnknownKeySuggestsAKeyOfAnotherSection) {
  SCOPED_TRACE(seed_);
  std::string path = write("run.yaml", "steps: 5\nmodel:\n  hidden_size: 8\n  learning_rate: 0.1\n");
  expect_error([&] { load_config(path, make_test_schema(), {}); },
               path + ":4: unknown key 'model.learning_rate'; did you mean 'optim.learning_rate'?");
  path = write("run2.yaml", "steps: 5\nbeta: 0.1\n");
  expect_error([&] { load_config(path, make_test_schema(), {}); },
               path + ":2: unknown key 'beta'; did you mean 'optim.beta'?");
}

TEST_F(ConfigTest, UnknownKeyFarFromEveryKeyHasNoSuggestion) {
  SCOPED_TRACE(seed_);
  std::string path = write("run.yaml", "steps: 5\nzqxwvjk: 1\n");
  expect_error([&] { load_config(path, make_test_schema(), {}); }, path + ":2: unknown key 'zqxwvjk' (");
}

TEST_F(ConfigTest, WrongTypeNamesLineColumnKeyAndExpectation) {
  SCOPED_TRACE(seed_);
  std::string path = write("run.yaml", "model_name_or_path: m\ndataset: d\noutput_dir: o\n\n\n\nmax_steps:     ten\n");
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":7:16: 'max_steps' expected an integer >= 1, got \"ten\"");
  path = write("q.yaml", train_recipe("packing: yes\n"));
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":5:10: 'packing' expected true or false, got \"yes\"");
  path = write("f.yaml", train_recipe("learning_rate: [1]\n"));
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":5:16: 'learning_rate' expected a number > 0, got a list");
  // Quoted numbers are strings.
  path = write("s.yaml", train_recipe("seed: \"7\"\n"));
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":5:7: 'seed' expected an integer >= 0, got \"7\"");
}

TEST_F(ConfigTest, OutOfRangeNamesTheRange) {
  SCOPED_TRACE(seed_);
  std::string path = write("run.yaml", "model_name_or_path: m\ndataset: d\noutput_dir: o\nmax_steps: 0\n");
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":4:12: 'max_steps' expected an integer >= 1, got 0");
  path = write("b.yaml", train_recipe("adam_beta2: 1.0\n"));
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":5:13: 'adam_beta2' expected a number in [0, 1), got 1.0");
  double negative = -random_float(1e-6, 1.0);
  path = write("lr.yaml", train_recipe(fmt::format("learning_rate: {}\n", negative)));
  expect_error([&] { load_config(path, train_schema(), {}); },
               fmt::format("{}:5:16: 'learning_rate' expected a number > 0, got {}", path, negative));
}

TEST_F(ConfigTest, EnumErrorListsAllowedValues) {
  SCOPED_TRACE(seed_);
  std::string path = write("run.yaml", train_recipe("stage: ptt\n"));
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":5:8: 'stage' expected one of pt, sft, hkd, got \"ptt\"");
}

TEST_F(ConfigTest, MissingRequiredKeyNamesKeyAndFile) {
  SCOPED_TRACE(seed_);
  std::string path = write("run.yaml", "model_name_or_path: m\ndataset: d\nmax_steps: 5\n");
  expect_error(
      [&] { load_config(path, train_schema(), {}); },
      path + ": missing required key 'output_dir' (Run directory: checkpoints, resolved_config.yaml, metrics)");
  path = write("null.yaml", "model_name_or_path: m\ndataset: d\nmax_steps: 5\noutput_dir: null\n");
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":4:13: 'output_dir' expected a string, got null");
}

TEST_F(ConfigTest, YamlSyntaxErrorNamesFileAndLine) {
  SCOPED_TRACE(seed_);
  std::string path = write("run.yaml", "max_steps: 5\ndataset: [a, b\noutput_dir: x\n");
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":3:11: YAML syntax error: end of sequence flow not found");
  path = write("top.yaml", "- a\n- b\n");
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":1:1: expected a mapping of keys at the top level, got a list");
  expect_error([&] { load_config((dir_ / "absent.yaml").string(), train_schema(), {}); },
               "cannot read config file '" + (dir_ / "absent.yaml").string() + "'");
}

TEST_F(ConfigTest, DuplicateKeyIsAnError) {
  SCOPED_TRACE(seed_);
  std::string path = write("run.yaml", "steps: 1\noptim:\n  beta: 0.5\noptim.beta: 0.2\n");
  expect_error([&] { load_config(path, make_test_schema(), {}); },
               path + ":4: duplicate key 'optim.beta' (first set at " + path + ":3)");
}

TEST_F(ConfigTest, SectionGivenAScalarIsAnError) {
  SCOPED_TRACE(seed_);
  std::string path = write("run.yaml", "steps: 1\noptim: 3\n");
  expect_error([&] { load_config(path, make_test_schema(), {}); },
               path + ":2:8: 'optim' is a section; expected a mapping of its keys, got 3");
}

TEST_F(ConfigTest, StringListAcceptsYamlListOrCommaSeparatedString) {
  SCOPED_TRACE(seed_);
  const std::vector<std::string> expected{"gka", "norm", "self_attn"};
  for (const char* form : {"gka,norm,self_attn", " gka , norm,self_attn ", "[gka, norm, self_attn]",
                           "\n  - gka\n  - norm\n  - self_attn"}) {
    SCOPED_TRACE(form);
    std::string path = write("run.yaml", train_recipe(std::string("hybrid_learnable_params: ") + form + "\n"));
    EXPECT_EQ(load_config(path, train_schema(), {}).get_list("hybrid_learnable_params"), expected);
  }
  std::string path = write("run.yaml", train_recipe());
  EXPECT_FALSE(load_config(path, train_schema(), {}).has("hybrid_learnable_params"));
  EXPECT_EQ(load_config(path, train_schema(), {"hybrid_learnable_params=gka,norm,self_attn"})
                .get_list("hybrid_learnable_params"),
            expected);
  path = write("bad.yaml", train_recipe("hybrid_learnable_params: [a, {b: 1}]\n"));
  expect_error([&] { load_config(path, train_schema(), {}); },
               path +
                   ":5:26: 'hybrid_learnable_params' expected a list of strings (a YAML list or a comma-separated "
                   "string), got a "
                   "list containing a mapping");
}

TEST_F(ConfigTest, MapAcceptsYamlMappingOrJsonString) {
  SCOPED_TRACE(seed_);
  int64_t theta = random_int(10000, 10000000);
  std::string as_yaml =
      write("a.yaml", train_recipe(fmt::format("config_overrides_json:\n  rope_parameters.rope_theta: {}\n"
                                               "  max_position_embeddings: 131072\n",
                                               theta)));
  std::string as_json =
      write("b.yaml", train_recipe(fmt::format("config_overrides_json: '{{\"rope_parameters.rope_theta\": {}, "
                                               "\"max_position_embeddings\": 131072}}'\n",
                                               theta)));
  std::string expected =
      fmt::format(R"({{"rope_parameters.rope_theta": {}, "max_position_embeddings": 131072}})", theta);
  EXPECT_EQ(load_config(as_yaml, train_schema(), {}).get_map_json("config_overrides_json"), expected);
  EXPECT_EQ(load_config(as_json, train_schema(), {}).get_map_json("config_overrides_json"), expected);
  std::string bad = write("c.yaml", train_recipe("config_overrides_json: '[1, 2]'\n"));
  expect_error([&] { load_config(bad, train_schema(), {}); },
               bad +
                   ":5:24: 'config_overrides_json' expected a mapping (YAML, or a string holding a JSON object), "
                   "got \"[1, 2]\"");
}

TEST_F(ConfigTest, OverridesAreParsedAndValidatedLikeTheFile) {
  SCOPED_TRACE(seed_);
  std::string path = write("run.yaml", train_recipe("learning_rate: 1e-4\n"));
  int64_t steps = random_int(1, 1000000);
  Config cfg = load_config(path, train_schema(),
                           {fmt::format("max_steps={}", steps), "learning_rate=3e-4", "dataset=[a, b]",
                            "model_name_or_path=null", "model_config={hidden_size: 64, model_type: qwen3}"});
  EXPECT_EQ(cfg.get_int("max_steps"), steps);
  EXPECT_DOUBLE_EQ(cfg.get_float("learning_rate"), 3e-4);
  EXPECT_EQ(cfg.get_list("dataset"), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(cfg.has("model_name_or_path"));
  EXPECT_EQ(cfg.get_map_json("model_config"), R"({"hidden_size": 64, "model_type": "qwen3"})");
  EXPECT_EQ(cfg.where("learning_rate"), "--set learning_rate=3e-4");

  expect_error([&] { load_config(path, train_schema(), {"max_steps=ten"}); },
               "--set max_steps=ten: 'max_steps' expected an integer >= 1, got \"ten\"");
  expect_error([&] { load_config(path, train_schema(), {"learnig_rate=1"}); },
               "--set learnig_rate=1: unknown key 'learnig_rate'; did you mean 'learning_rate'?");
  expect_error([&] { load_config(path, train_schema(), {"max_steps"}); }, "--set max_steps: expected key.path=value");
  expect_error([&] { load_config(path, train_schema(), {"model_config.hidden_size=3"}); },
               "--set model_config.hidden_size=3: 'model_config' is a free-form mapping and is set whole");
  // Sections reached through an override path.
  std::string sectioned = write("s.yaml", "steps: 2\n");
  EXPECT_DOUBLE_EQ(load_config(sectioned, make_test_schema(), {"optim.beta=0.25"}).get_float("optim.beta"), 0.25);
  EXPECT_DOUBLE_EQ(load_config(sectioned, make_test_schema(), {"optim={beta: 0.75}"}).get_float("optim.beta"), 0.75);
}

TEST_F(ConfigTest, BaseInheritanceChildOverridesAndPathsAreRelative) {
  SCOPED_TRACE(seed_);
  int64_t base_steps = random_int(1, 1000), child_steps = random_int(1001, 2000);
  std::string base = write("recipes/common/base.yaml",
                           fmt::format("model_name_or_path: m\ndataset: d\noutput_dir: runs/base\nmax_steps: {}\n"
                                       "warmup_steps: 10\nseed: 7\n",
                                       base_steps));
  std::string child = write("recipes/child.yaml", fmt::format("base: common/base.yaml\nmax_steps: {}\n"
                                                              "warmup_steps: null\nwarmup_ratio: 0.1\n",
                                                              child_steps));
  Config cfg = load_config(child, train_schema(), {});
  EXPECT_EQ(cfg.get_int("max_steps"), child_steps);
  EXPECT_EQ(cfg.get_int("seed"), 7);
  EXPECT_EQ(cfg.get_string("output_dir"), "runs/base");
  EXPECT_FALSE(cfg.has("warmup_steps"));
  EXPECT_DOUBLE_EQ(cfg.get_float("warmup_ratio"), 0.1);
  EXPECT_EQ(cfg.where("seed"), (dir_ / "recipes/common/base.yaml").string() + ":6");
  EXPECT_EQ(cfg.where("max_steps"), child + ":2");

  // Errors in a base file name the base file.
  std::string bad_base = write("bad_base.yaml", "max_step: 3\n");
  std::string bad_child = write("bad_child.yaml", "base: bad_base.yaml\n");
  expect_error([&] { load_config(bad_child, train_schema(), {}); },
               bad_base + ":1: unknown key 'max_step'; did you mean 'max_steps'?");
  std::string orphan = write("orphan.yaml", "max_steps: 3\nbase: nowhere.yaml\n");
  expect_error([&] { load_config(orphan, train_schema(), {}); },
               orphan + ":2: base file 'nowhere.yaml' not found (looked for " + (dir_ / "nowhere.yaml").string() + ")");
}

TEST_F(ConfigTest, BaseInheritanceCycleIsDetected) {
  SCOPED_TRACE(seed_);
  std::string a = write("a.yaml", "base: b.yaml\nmax_steps: 1\n");
  std::string b = write("b.yaml", "base: a.yaml\nseed: 1\n");
  expect_error([&] { load_config(a, train_schema(), {}); },
               a + ": 'base' inheritance cycle: " + a + " -> " + b + " -> " + a);
  std::string self = write("self.yaml", "base: ./self.yaml\n");
  expect_error([&] { load_config(self, train_schema(), {}); }, self + ": 'base' inheritance cycle: ");
}

TEST_F(ConfigTest, WarmupStepsAndRatioAreMutuallyExclusive) {
  SCOPED_TRACE(seed_);
  std::string path = write("run.yaml", train_recipe("warmup_steps: 5\nwarmup_ratio: 0.1\n"));
  expect_error([&] { load_config(path, train_schema(), {}); },
               path + ":5: 'warmup_steps' and 'warmup_ratio' are mutually exclusive ('warmup_ratio' is set at " + path +
                   ":6); set only one");
  path = write("nomodel.yaml", "dataset: d\noutput_dir: o\nmax_steps: 3\n");
  expect_error([&] { load_config(path, train_schema(), {}); }, path + ": set 'model_name_or_path' or 'model_config'");
}

TEST_F(ConfigTest, ResolvedYamlRoundTripsToTheSameValues) {
  SCOPED_TRACE(seed_);
  std::string path =
      write("run.yaml",
            fmt::format("model_config: {{hidden_size: {}, rope_theta: 1e6, name: \"x y\", layers: [1, 2], tie: true}}\n"
                        "dataset: \"corpus one, corpus-two\"\noutput_dir: \"runs/odd name: 1\"\nmax_steps: {}\n"
                        "learning_rate: {}\nadam_beta2: {}\nweight_decay: {}\nhybrid_learnable_params: [gka, \"123\", "
                        "\"null\"]\ntemplate: \"true\"\nwarmup_ratio: {}\nsave_total_limit: {}\nbf16: false\n"
                        "config_overrides_json: {{}}\n",
                        random_int(8, 4096), random_int(1, 1 << 20), random_float(1e-6, 1e-2),
                        random_float(0.9, 0.9999), random_float(0, 0.5), random_float(0, 1), random_int(1, 20)));
  Config first = load_config(path, train_schema(), {"seed=123456789012"});
  std::string resolved = first.resolved_yaml();
  Config second = load_config(write("resolved.yaml", resolved), train_schema(), {});
  EXPECT_EQ(second.resolved_yaml(), resolved);
  for (const Field& f : train_schema().fields()) {
    SCOPED_TRACE(f.key);
    ASSERT_EQ(first.has(f.key), second.has(f.key));
    if (!first.has(f.key)) continue;
    switch (f.type) {
      case FieldType::Int: EXPECT_EQ(first.get_int(f.key), second.get_int(f.key)); break;
      case FieldType::Float: EXPECT_EQ(first.get_float(f.key), second.get_float(f.key)); break;  // bit-exact
      case FieldType::Bool: EXPECT_EQ(first.get_bool(f.key), second.get_bool(f.key)); break;
      case FieldType::String:
      case FieldType::Enum: EXPECT_EQ(first.get_string(f.key), second.get_string(f.key)); break;
      case FieldType::StringList: EXPECT_EQ(first.get_list(f.key), second.get_list(f.key)); break;
      case FieldType::Map: EXPECT_EQ(first.get_map_json(f.key), second.get_map_json(f.key)); break;
    }
  }
  EXPECT_EQ(second.get_list("dataset"), (std::vector<std::string>{"corpus one", "corpus-two"}));
  EXPECT_EQ(second.get_list("hybrid_learnable_params"), (std::vector<std::string>{"gka", "123", "null"}));
  EXPECT_EQ(second.get_string("template"), "true");
  EXPECT_EQ(second.get_string("output_dir"), "runs/odd name: 1");
  EXPECT_EQ(second.get_int("seed"), 123456789012);
  EXPECT_EQ(second.get_map_json("config_overrides_json"), "{}");

  // Sections are written once, nested, even when their keys were declared apart.
  Config sectioned = load_config(write("s.yaml", "steps: 4\n"), make_test_schema(), {});
  EXPECT_NE(sectioned.resolved_yaml().find("optim:\n  learning_rate: 0.1\n  beta: 0.9\nmodel:\n  hidden_size: 64\n"),
            std::string::npos)
      << sectioned.resolved_yaml();
  Config again = load_config(write("s2.yaml", sectioned.resolved_yaml()), make_test_schema(), {});
  EXPECT_EQ(again.resolved_yaml(), sectioned.resolved_yaml());
}

TEST_F(ConfigTest, GettersRejectUndeclaredKeysWrongTypesAndUnsetOptionals) {
  SCOPED_TRACE(seed_);
  Config cfg = load_config(write("run.yaml", train_recipe()), train_schema(), {});
  expect_error([&] { cfg.get_int("max_step"); }, "config: 'max_step' is not a key of the schema");
  expect_error([&] { cfg.has("nope"); }, "config: 'nope' is not a key of the schema");
  expect_error([&] { cfg.get_float("max_steps"); }, "config: 'max_steps' is declared as integer but read as number");
  EXPECT_FALSE(cfg.has("warmup_steps"));
  expect_error([&] { cfg.get_int("warmup_steps"); }, "config: 'warmup_steps' is not set");
  EXPECT_TRUE(cfg.has("seed"));
  EXPECT_EQ(cfg.get_int("seed"), 42);
}

TEST(TrainSchema, DocsAreUpToDate) {
  fs::path doc = fs::path(PRIMER_SOURCE_DIR) / "docs" / "recipes.md";
  std::string expected = train_recipe_reference();
  if (std::getenv("PRIMER_UPDATE_DOCS")) std::ofstream(doc) << expected;
  std::ifstream in(doc);
  ASSERT_TRUE(in) << "cannot read " << doc;
  std::stringstream actual;
  actual << in.rdbuf();
  EXPECT_EQ(actual.str(), expected) << doc << " is stale; regenerate it with PRIMER_UPDATE_DOCS=1 "
                                    << "primer_tests --gtest_filter='TrainSchema.DocsAreUpToDate'";
  // Every key is documented.
  for (const Field& f : train_schema().fields()) EXPECT_NE(expected.find("| `" + f.key + "` |"), std::string::npos);
}

}  // namespace
}  // namespace primer::config
