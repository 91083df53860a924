// Priming Stage 0 and unfuse: hybrid patterns from ratios and importance scores, the gate initialisation,
// prime-init end to end on a small Qwen3 checkpoint (what is copied lands bit for bit, the teacher is the source),
// and unfuse (the student stream of the fused model is the standalone hybrid).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "core/autograd/functions.h"
#include "core/io/json.h"
#include "layers/decoder_lm.h"
#include "layers/hf_checkpoint.h"
#include "recipes/hf_transfer.h"
#include "recipes/hybrid_patterns.h"
#include "recipes/layer_selection.h"
#include "recipes/prime_init.h"
#include "recipes/prime_init_schema.h"
#include "recipes/soup.h"
#include "recipes/unfuse.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

namespace fs = std::filesystem;
using recipes::selective_pattern;
using recipes::uniform_pattern;

constexpr MixerKind A = MixerKind::Attention, G = MixerKind::GatedKalmaNet;

TEST(HybridPatterns, UniformSpacesAttentionFromLayerZero) {
  EXPECT_EQ(uniform_pattern(6, 0.5, G), (std::vector<MixerKind>{A, G, A, G, A, G}));
  EXPECT_EQ(uniform_pattern(8, 0.75, G), (std::vector<MixerKind>{A, G, G, G, A, G, G, G}));
  EXPECT_EQ(uniform_pattern(4, 0.0, G), (std::vector<MixerKind>{A, A, A, A}));
  EXPECT_EQ(format_hybrid_pattern(uniform_pattern(36, 0.5, G)).substr(0, 10), "*-GKA-*-GK");
}

TEST(HybridPatterns, SelectiveConvertsTheLeastImportantLayers) {
  const std::vector<double> importance = {0.01, 0.30, 0.02, 0.25, 0.02, 0.10};
  EXPECT_EQ(selective_pattern(importance, 0.5, G), (std::vector<MixerKind>{G, A, G, A, G, A}));
  EXPECT_EQ(selective_pattern(importance, 1.0 / 3.0, G), (std::vector<MixerKind>{G, A, G, A, A, A}));  // tie: 2 < 4
}

TEST(HybridPatterns, ImportanceCsvErrorsNameFileAndLine) {
  const std::string path = testing::TempDir() + "/importance-" + std::to_string(test::fresh_seed()) + ".csv";
  std::ofstream(path) << "layer,heldout_loss,importance\n0,2.5,0.1\n1,2.7,x\n";
  test::expect_error([&] { recipes::read_importance_csv(path); }, {path + ":3", "'x' is not a number"});
  std::ofstream(path) << "layer,heldout_loss,importance\n0,2.5,0.1\n2,2.7,0.3\n";
  test::expect_error([&] { recipes::read_importance_csv(path); }, {path + ":3", "layer '2', expected 1"});
  std::ofstream(path) << "layer,loss\n0,1\n";
  test::expect_error([&] { recipes::read_importance_csv(path); }, {"lacks the columns"});
  std::ofstream(path) << "layer,heldout_loss,importance\n0,2.5,0.1\n1,2.7,0.3\n";
  EXPECT_EQ(recipes::read_importance_csv(path), (std::vector<double>{0.1, 0.3}));
  fs::remove(path);
}

TEST(PrimeInit, GateIsHalfTheSumOfOutputTransposeAndExpandedValues) {
  const uint64_t seed = test::fresh_seed();
  const int64_t hidden = 3, D = 2, Hq = 4, Hkv = 2, groups = Hq / Hkv;
  const Tensor w_o = test::randn({hidden, Hq * D}, seed, DType::F32),
               w_v = test::randn({Hkv * D, hidden}, seed + 1, DType::F32);
  const auto o = w_o.to_vector<double>(), v = w_v.to_vector<double>();
  for (const bool rowwise : {false, true}) {
    const Tensor gate = Tensor::empty({Hq * D, hidden}, DType::F32);
    recipes::init_gate(gate, w_o, w_v, D, groups, rowwise);
    const auto g = gate.to_vector<double>();
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t d = 0; d < D; ++d)
        for (int64_t c = 0; c < hidden; ++c) {
          const int64_t row = h * D + d;
          // Head-wise: query head h reads kv head h / groups, same dim d. Row-wise: W_V row `row / groups`.
          const int64_t v_row = rowwise ? row / groups : (h / groups) * D + d;
          EXPECT_FLOAT_EQ(g[size_t(row * hidden + c)],
                          0.5 * (o[size_t(c * Hq * D + row)] + v[size_t(v_row * hidden + c)]))
              << (rowwise ? "row-wise" : "head-wise") << " row " << row;
        }
  }
}

ModelConfig tiny_qwen3() {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 17, c.hidden_size = 8, c.intermediate_size = 12, c.num_hidden_layers = 4;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 4, c.max_position_embeddings = 64;
  c.qk_norm = true, c.tie_word_embeddings = true;
  c.torch_dtype = DType::F32;
  return c;
}

struct TinyBase {
  std::string dir;
  ParameterRegistry params;
  explicit TinyBase(uint64_t seed) : dir(testing::TempDir() + "/primer-base-" + std::to_string(seed)) {
    layers::DecoderLM model(tiny_qwen3(), params);
    params.materialize(Device::cpu(), DType::F32, seed);
    layers::export_hf(dir, tiny_qwen3(), params, DType::F32);
    std::ofstream(dir + "/tokenizer.json") << "{}";
  }
  ~TinyBase() { fs::remove_all(dir); }
};

// The commands that take a Hugging Face model directory name what they were given instead: a Transformer where
// unfuse needs a fused model, a training checkpoint (with what to pass in its place), a directory without a model,
// nothing at all.
TEST(PrimeInit, ModelDirectoryCommandsSayWhatTheyWereGiven) {
  const uint64_t seed = test::fresh_seed();
  TinyBase base(seed);
  test::expect_error([&] { recipes::run_unfuse(base.dir, base.dir + "-out"); },
                     {"config.json is not a fused teacher-student checkpoint"});
  const std::string checkpoint = base.dir + "-checkpoint";
  fs::create_directories(checkpoint);
  std::ofstream(checkpoint + "/manifest.json") << "{}";
  test::expect_error([&] { recipes::run_unfuse(checkpoint, ""); },
                     {"unfuse: '" + checkpoint + "' is a training checkpoint", "primer export"});
  test::expect_error([&] { recipes::run_import(checkpoint, checkpoint + "-out", DType::F32); },
                     {"import: '" + checkpoint + "' is a training checkpoint"});
  test::expect_error(
      [&] {
        recipes::run_soup({base.dir, checkpoint}, {}, checkpoint + "-out");
      },
      {"soup: '" + checkpoint + "' is a training checkpoint"});
  const std::string yaml = base.dir + "-stage0.yaml";
  std::ofstream(yaml) << "base_model_name_or_path: " << checkpoint << "\noutput_dir: " << checkpoint
                      << "-stage0\nhybrid_ratio: 0.5\nssm_mixer: SWA\nswa:\n  window_size: 3\n";
  test::expect_error([&] { recipes::run_prime_init(yaml, {}); },
                     {"(base_model_name_or_path): '" + checkpoint + "' is a training checkpoint"});
  fs::remove(checkpoint + "/manifest.json");
  test::expect_error([&] { recipes::run_unfuse(checkpoint + "/", ""); },
                     {"unfuse: '" + checkpoint + "' has no config.json", "Hugging Face model directory"});
  test::expect_error([&] { recipes::run_unfuse(checkpoint + "-missing", ""); },
                     {"unfuse: '" + checkpoint + "-missing' does not exist"});
  for (const std::string& written : {checkpoint + "_unfused", checkpoint + "-out", checkpoint + "-stage0"})
    EXPECT_FALSE(fs::exists(written)) << written;
  fs::remove_all(checkpoint);
  fs::remove(yaml);
}

TEST(PrimeInit, EndToEndWithSlidingWindowStudentsThenUnfuse) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  TinyBase base(seed);
  const std::string out = base.dir + "-stage0", yaml = base.dir + "-stage0.yaml";
  std::ofstream(yaml) << "base_model_name_or_path: " << base.dir << "\noutput_dir: " << out
                      << "\nhybrid_ratio: 0.5\nssm_mixer: SWA\nswa:\n  window_size: 3\ndtype: fp32\n";
  ASSERT_EQ(recipes::run_prime_init(yaml, {}), 0);
  const ModelConfig fused = load_hf_config(out + "/config.json");
  EXPECT_TRUE(fused.fused);
  EXPECT_EQ(format_hybrid_pattern(HybridPattern{fused.layer_types, true}), "*DA-SWA*-*DA-SWA*");
  EXPECT_TRUE(fs::exists(out + "/tokenizer.json"));
  EXPECT_TRUE(fs::exists(out + "/prime_init_log.txt"));

  ParameterRegistry params;
  layers::DecoderLM model(fused, params);
  params.materialize(Device::cpu(), DType::F32, seed + 1);
  layers::load_hf_weights(out, params);
  for (Parameter* p : base.params.all())  // the teacher and every shared weight are the source's, bit for bit
    test::expect_close(params.get(p->name).master, p->master, 0, 0, p->name);
  for (const char* leaf : {"q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"})
    test::expect_close(params.get(std::string("model.layers.1.swa.") + leaf + ".weight").master,
                       base.params.get(std::string("model.layers.1.self_attn.") + leaf + ".weight").master, 0, 0, leaf);

  ASSERT_EQ(recipes::run_unfuse(out + "/", ""), 0);
  const ModelConfig hybrid = load_hf_config(out + "_unfused/config.json");
  EXPECT_FALSE(hybrid.fused);
  EXPECT_EQ(format_hybrid_pattern(hybrid.layer_types), "*-SWA-*-SWA");
  ParameterRegistry hybrid_params;
  layers::DecoderLM hybrid_model(hybrid, hybrid_params);
  hybrid_params.materialize(Device::cpu(), DType::F32, seed + 2);
  layers::load_hf_weights(out + "_unfused", hybrid_params);
  EXPECT_FALSE(hybrid_params.contains("model.layers.1.self_attn.q_proj.weight"));
  const Tensor ids = test::rand_ints({2, 6}, seed + 3, 0, 17);
  ag::NoGrad no_grad;
  test::expect_close(hybrid_model.hidden_states(ids)->value, model.hidden_states(ids)->value, 0, 0,
                     "unfused hybrid = fused student stream");
  for (const std::string& d : {out, out + "_unfused"}) fs::remove_all(d);
  fs::remove(yaml);
}

// Loads a Stage 0 output directory into a fused model on the CPU (f32 masters).
struct Loaded {
  ModelConfig config;
  ParameterRegistry params;
  std::unique_ptr<layers::DecoderLM> model;
  explicit Loaded(const std::string& dir) : config(load_hf_config(dir + "/config.json")) {
    model = std::make_unique<layers::DecoderLM>(config, params);
    params.materialize(Device::cpu(), DType::F32, 1);
    layers::load_hf_weights(dir, params);
  }
  Tensor get(const std::string& name) { return params.get(name).master; }
};

TEST(PrimeInit, Mamba2InProjRowsComeFromTheAttention) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  TinyBase base(seed);
  const std::string out = base.dir + "-m2", yaml = base.dir + "-m2.yaml";
  std::ofstream(yaml) << "base_model_name_or_path: " << base.dir << "\noutput_dir: " << out
                      << "\nhybrid_override_pattern: '*-M2-*-*'\ndtype: fp32\n";
  ASSERT_EQ(recipes::run_prime_init(yaml, {}), 0);
  Loaded fused(out);
  EXPECT_EQ(format_hybrid_pattern(HybridPattern{fused.config.layer_types, true}), "*DA-M2*-*DA-*DA");
  auto teacher = [&](const char* leaf) {
    return base.params.get(std::string("model.layers.1.self_attn.") + leaf).master;
  };
  const Tensor in_proj = fused.get("model.layers.1.mamba.in_proj.weight");
  const int64_t d_inner = 16, d_xb = 8;  // Hq·D, Hkv·D
  test::expect_close(in_proj.slice(0, d_inner, d_inner + d_xb), teacher("v_proj.weight"), 0, 0, "x ← W_V");
  test::expect_close(in_proj.slice(0, d_inner + d_xb, d_inner + 2 * d_xb), teacher("k_proj.weight"), 0, 0, "B ← W_K");
  test::expect_close(in_proj.slice(0, d_inner + 2 * d_xb, 2 * d_inner + 2 * d_xb), teacher("q_proj.weight"), 0, 0,
                     "C ← W_Q");
  const Tensor gate = Tensor::empty({d_inner, 8}, DType::F32);
  recipes::init_gate(gate, teacher("o_proj.weight"), teacher("v_proj.weight"), 4, 2, false);
  test::expect_close(in_proj.slice(0, 0, d_inner), gate, 0, 0, "z ← head-wise gate");
  test::expect_close(fused.get("model.layers.1.mamba.out_proj.weight"), teacher("o_proj.weight"), 0, 0, "out_proj");
  test::expect_close(fused.get("model.layers.1.mamba.B_norm.weight"), teacher("k_norm.weight"), 0, 0, "B_norm");
  test::expect_close(fused.get("model.layers.1.mamba.C_norm.weight"), teacher("q_norm.weight"), 0, 0, "C_norm");
  // The dt rows and the dynamics keep the reference's random initialisation.
  EXPECT_GT(test::compare(in_proj.slice(0, 2 * d_inner + 2 * d_xb, 2 * d_inner + 2 * d_xb + 4),
                          Tensor::zeros({4, 8}, DType::F32))
                .max_abs,
            0);
  fs::remove_all(out);
  fs::remove(yaml);
}

TEST(PrimeInit, GkaAndGdnTakeProjectionsAndTheGateFromTheAttention) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  TinyBase base(seed);
  for (const char* gate_init : {"headwise", "rowwise"}) {
    SCOPED_TRACE(gate_init);
    const std::string out = base.dir + "-gka-gdn", yaml = base.dir + "-gka-gdn.yaml";
    std::ofstream(yaml) << "base_model_name_or_path: " << base.dir << "\noutput_dir: " << out
                        << "\nhybrid_override_pattern: '*DA-GKA*-*DA-GDN*'\ndtype: fp32\n";
    ASSERT_EQ(recipes::run_prime_init(yaml, {std::string("gate_init=") + gate_init}), 0);
    Loaded fused(out);
    for (const auto& [layer, module] : {std::pair{1, "gka"}, std::pair{3, "gdn"}}) {
      const std::string t = "model.layers." + std::to_string(layer) + ".self_attn.";
      const std::string m = "model.layers." + std::to_string(layer) + "." + module + ".";
      for (const char* proj : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"})
        test::expect_close(fused.get(m + proj), base.params.get(t + proj).master, 0, 0, m + proj);
      const Tensor gate = Tensor::empty({16, 8}, DType::F32);
      recipes::init_gate(gate, base.params.get(t + "o_proj.weight").master, base.params.get(t + "v_proj.weight").master,
                         4, 2, std::string(gate_init) == "rowwise");
      test::expect_close(fused.get(m + "g_proj.weight"), gate, 0, 0, m + "g_proj.weight");
    }
    fs::remove_all(out);
    fs::remove(yaml);
  }
}

// KZLA, KLA and GDN2 take GDN's rule (by analogy: their papers have no Priming transfer): projections copied, the
// gate from W_O and W_V.
TEST(PrimeInit, KzlaKlaAndGdn2TakeGdnsTransfer) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  TinyBase base(seed);
  for (const auto& [token, module] : {std::pair{"KZLA", "kzla"}, std::pair{"KLA", "kla"}, std::pair{"GDN2", "gdn2"}}) {
    SCOPED_TRACE(token);
    const std::string out = base.dir + "-" + module, yaml = base.dir + "-" + module + ".yaml";
    std::ofstream(yaml) << "base_model_name_or_path: " << base.dir << "\noutput_dir: " << out
                        << "\nhybrid_ratio: 0.5\nssm_mixer: " << token << "\ndtype: fp32\n";
    ASSERT_EQ(recipes::run_prime_init(yaml, {}), 0);
    Loaded fused(out);
    const std::string t = "model.layers.1.self_attn.", m = std::string("model.layers.1.") + module + ".";
    for (const char* proj : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"})
      test::expect_close(fused.get(m + proj), base.params.get(t + proj).master, 0, 0, m + proj);
    const Tensor gate = Tensor::empty({16, 8}, DType::F32);
    recipes::init_gate(gate, base.params.get(t + "o_proj.weight").master, base.params.get(t + "v_proj.weight").master,
                       4, 2, false);
    test::expect_close(fused.get(m + "g_proj.weight"), gate, 0, 0, m + "g_proj.weight");
    fs::remove_all(out);
    fs::remove(yaml);
  }
}

// B'MOJO-F (the reference's bmojo_attention_init): the attention's projections and QK-norms into bmojo_attn and its
// untied fading copies; the SSM by its own rule under its module.
TEST(PrimeInit, BmfCopiesTheAttentionAndInitialisesItsSsmByItsRule) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  TinyBase base(seed);
  for (const auto& [ssm, module] : {std::pair{"gka", "gka"}, std::pair{"mamba2", "mamba"}}) {
    SCOPED_TRACE(ssm);
    const std::string out = base.dir + "-bmf", yaml = base.dir + "-bmf.yaml";
    std::ofstream(yaml) << "base_model_name_or_path: " << base.dir << "\noutput_dir: " << out
                        << "\nhybrid_override_pattern: '*DA-BMF*-*DA-*DA'\nbmojo:\n  window_size: 4\n"
                        << "  tie_attn_weights: false\n  ssm_mixer: " << ssm << "\ndtype: fp32\n";
    ASSERT_EQ(recipes::run_prime_init(yaml, {}), 0);
    Loaded fused(out);
    EXPECT_EQ(fused.config.bmojo.ssm_mixer, ssm);
    EXPECT_EQ(fused.config.bmojo.window_size, 4);
    const std::string t = "model.layers.1.self_attn.", m = "model.layers.1.bmojo_f.";
    auto teacher = [&](const std::string& leaf) { return base.params.get(t + leaf).master; };
    for (const std::string s : {"", "_"}) {
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "q_norm", "k_norm"})
        test::expect_close(fused.get(m + "bmojo_attn." + proj + s + ".weight"), teacher(std::string(proj) + ".weight"),
                           0, 0, proj + s);
    }
    test::expect_close(fused.get(m + "bmojo_attn.o_proj.weight"), teacher("o_proj.weight"), 0, 0, "o_proj");
    const std::string inner = m + module + ".";
    const Tensor gate = Tensor::empty({16, 8}, DType::F32);
    recipes::init_gate(gate, teacher("o_proj.weight"), teacher("v_proj.weight"), 4, 2, false);
    if (std::string(module) == "gka") {
      test::expect_close(fused.get(inner + "q_proj.weight"), teacher("q_proj.weight"), 0, 0, "gka.q_proj");
      test::expect_close(fused.get(inner + "o_proj.weight"), teacher("o_proj.weight"), 0, 0, "gka.o_proj");
      test::expect_close(fused.get(inner + "g_proj.weight"), gate, 0, 0, "gka.g_proj");
    } else {
      const Tensor in_proj = fused.get(inner + "in_proj.weight");
      test::expect_close(in_proj.slice(0, 16, 24), teacher("v_proj.weight"), 0, 0, "mamba x ← W_V");
      test::expect_close(in_proj.slice(0, 0, 16), gate, 0, 0, "mamba z ← gate");
      test::expect_close(fused.get(inner + "out_proj.weight"), teacher("o_proj.weight"), 0, 0, "mamba.out_proj");
    }
    fs::remove_all(out);
    fs::remove(yaml);
  }
}

TEST(PrimeInit, RecipeErrors) {
  const std::string yaml = testing::TempDir() + "/stage0-bad-" + std::to_string(test::fresh_seed()) + ".yaml";
  std::ofstream(yaml) << "base_model_name_or_path: x\noutput_dir: y\n";
  test::expect_error([&] { recipes::run_prime_init(yaml, {}); },
                     {"exactly one of 'hybrid_override_pattern' and 'hybrid_ratio'"});
  std::ofstream(yaml) << "base_model_name_or_path: x\noutput_dir: y\nhybrid_ratio: 0.5\ngka:\n  num_iters: 10\n";
  test::expect_error([&] { recipes::run_prime_init(yaml, {}); }, {yaml + ":5", "did you mean 'gka.num_iter'"});
  fs::remove(yaml);
}

TEST(PrimeInit, DocsAreUpToDate) {
  const fs::path doc = fs::path(PRIMER_SOURCE_DIR) / "docs" / "stage0.md";
  const std::string expected = recipes::prime_init_reference();
  if (std::getenv("PRIMER_UPDATE_DOCS")) std::ofstream(doc) << expected;
  std::ifstream in(doc);
  ASSERT_TRUE(in) << "cannot read " << doc;
  std::stringstream actual;
  actual << in.rdbuf();
  EXPECT_EQ(actual.str(), expected) << doc << " is stale; regenerate it with PRIMER_UPDATE_DOCS=1 "
                                    << "primer_tests --gtest_filter='PrimeInit.DocsAreUpToDate'";
}

}  // namespace
}  // namespace primer

namespace primer {
namespace {

TEST(LayerSelection, ScoresEachLayerWindowedAloneAndRestoresIt) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ParameterRegistry params;
  layers::DecoderLM model(tiny_qwen3(), params);
  params.materialize(Device::cpu(), DType::F64, seed);
  const Tensor ids = test::rand_ints({2, 12}, seed + 1, 0, 17), targets = test::rand_ints({2, 12}, seed + 2, 0, 17);
  auto evaluate = [&] {
    ag::NoGrad no_grad;
    return model.loss(ids, targets, 1.0)->value.item() / 24;
  };
  double baseline = 0;
  std::vector<int64_t> heard;
  const auto scores = recipes::score_layers(model, 2, evaluate, &baseline,
                                            [&](const recipes::LayerScore& s) { heard.push_back(s.layer); });
  EXPECT_EQ(heard, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(evaluate(), baseline);  // every window restored
  for (const auto& s : scores) {
    // The same loss with only that layer windowed, computed independently.
    ModelConfig c = tiny_qwen3();
    c.layer_types.assign(4, MixerKind::Attention);
    c.layer_types[size_t(s.layer)] = MixerKind::SlidingWindow;
    c.swa.window_size = 2;
    ParameterRegistry p2;
    layers::DecoderLM windowed(c, p2);
    p2.materialize(Device::cpu(), DType::F64, seed);
    for (Parameter* p : p2.all()) {
      std::string name = p->name;
      if (const size_t at = name.find(".swa."); at != std::string::npos) name.replace(at, 5, ".self_attn.");
      p->var->value = params.get(name).var->value;
    }
    ag::NoGrad no_grad;
    EXPECT_NEAR(s.metric, windowed.loss(ids, targets, 1.0)->value.item() / 24, 1e-12) << "layer " << s.layer;
    EXPECT_NEAR(s.importance, (s.metric - baseline) / baseline, 1e-15);
  }
  const std::string csv = testing::TempDir() + "/scores-" + std::to_string(seed) + ".csv";
  recipes::write_importance_csv(csv, baseline, scores);
  const auto importance = recipes::read_importance_csv(csv);
  ASSERT_EQ(importance.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(importance[i], scores[i].importance, 1e-8);
  fs::remove(csv);
}

TEST(Soup, AveragesCheckpointsElementwise) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  TinyBase a(seed), b(seed + 1);
  const std::string out = a.dir + "-soup";
  ASSERT_EQ(recipes::run_soup({a.dir, b.dir}, {0.25, 0.75}, out), 0);
  ParameterRegistry soup;
  layers::DecoderLM model(tiny_qwen3(), soup);
  soup.materialize(Device::cpu(), DType::F32, 0);
  layers::load_hf_weights(out, soup);
  for (Parameter* p : soup.all()) {
    const auto x = a.params.get(p->name).master.to_vector<double>(),
               y = b.params.get(p->name).master.to_vector<double>();
    const auto s = p->master.to_vector<double>();
    for (size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(s[i], 0.25 * x[i] + 0.75 * y[i], 1e-6) << p->name;
  }
  test::expect_error([&] { recipes::run_soup({a.dir, b.dir}, {0.5, 0.6}, out); }, {"sum to 1.1"});
  fs::remove_all(out);
}

// An output that is one of the inputs (by its own name, a symlink or a relative path) is refused before anything is
// written: the average overwrote the weights it was reading.
TEST(Soup, OutputThatIsAnInputIsRefused) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  TinyBase a(seed), b(seed + 1);
  auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string weights = bytes(b.dir + "/model.safetensors");
  const std::string link = b.dir + "-link";
  fs::create_directory_symlink(b.dir, link);
  for (const std::string& out : {b.dir, link, fs::relative(b.dir).string(), b.dir + "/./"})
    test::expect_error(
        [&] {
          recipes::run_soup({a.dir, b.dir}, {}, out);
        },
        {"soup: --out '" + out + "' is the input checkpoint '" + b.dir + "'"});
  EXPECT_EQ(bytes(b.dir + "/model.safetensors"), weights) << "the refused soup wrote into its input";
  fs::remove(link);
}

}  // namespace
}  // namespace primer
