// Generation and evaluation of trained models: sampling (greedy, temperature, top-k, top-p) is reproducible from a
// seed and draws by the probabilities; stop strings and end tokens end a completion; batched prompts decode as they
// do alone; a lone prompt's streamed pieces make up its text; a trained checkpoint and its Hugging Face export load
// to the same model; `primer eval` on a checkpoint gives the loss its training run logged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "layers/hf_checkpoint.h"
#include "recipes/evaluate.h"
#include "recipes/generate.h"
#include "recipes/inference_model.h"
#include "recipes/trainer.h"
#include "tests/support/mixer_checks.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_tokenizer.h"

namespace primer {
namespace {

Tensor logits_of(const std::vector<float>& v) { return Tensor::from_vector(v, {1, int64_t(v.size())}, DType::F32); }

std::vector<int32_t> draws(recipes::TokenSampler& s, const Tensor& logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.next(logits)[0]);
  return out;
}

TEST(TokenSampler, GreedyTopKAndTopPPickTheMostLikely) {
  const Tensor logits =
      Tensor::from_vector(std::vector<float>{0.1f, 2.0f, -1.0f, 2.0f, 0.5f, 3.0f}, {2, 3}, DType::F32);
  recipes::TokenSampler greedy({});
  EXPECT_EQ(greedy.next(logits), (std::vector<int32_t>{1, 2}));  // ties: the first
  recipes::TokenSampler top_k({.temperature = 5, .top_k = 1, .seed = 3});
  recipes::TokenSampler top_p({.temperature = 1, .top_p = 0.01, .seed = 3});
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(top_k.next(logits), (std::vector<int32_t>{1, 2}));
    EXPECT_EQ(top_p.next(logits), (std::vector<int32_t>{1, 2}));
  }
}

TEST(TokenSampler, ASeedReproducesItsDrawsWhichFollowTheProbabilities) {
  const Tensor logits = logits_of({0.f, std::log(3.f), -30.f});  // p = 1/4, 3/4, ~0
  recipes::TokenSampler a({.temperature = 1, .seed = 7}), b({.temperature = 1, .seed = 7}),
      c({.temperature = 1, .seed = 8});
  const std::vector<int32_t> first = draws(a, logits, 4000);
  EXPECT_EQ(first, draws(b, logits, 4000));
  EXPECT_NE(first, draws(c, logits, 4000));
  const double ones = double(std::count(first.begin(), first.end(), 1)) / 4000;
  EXPECT_NEAR(ones, 0.75, 0.03);
  EXPECT_EQ(std::count(first.begin(), first.end(), 2), 0);
  // Top-k 2 of [a, b, c] with c likeliest drops a; top-p 0.7 keeps only the likeliest two of (0.1, 0.3, 0.6).
  recipes::TokenSampler k2({.temperature = 1, .top_k = 2, .seed = 1});
  for (int32_t id : draws(k2, logits_of({0.f, 1.f, 2.f}), 200)) EXPECT_NE(id, 0);
  recipes::TokenSampler p07({.temperature = 1, .top_p = 0.7, .seed = 1});
  for (int32_t id : draws(p07, logits_of({std::log(.1f), std::log(.3f), std::log(.6f)}), 200)) EXPECT_NE(id, 0);
}

TEST(TokenSampler, OptionsOutOfRangeAreNamed) {
  EXPECT_THROW(recipes::TokenSampler({.temperature = -1}), Error);
  EXPECT_THROW(recipes::TokenSampler({.top_k = -2}), Error);
  EXPECT_THROW(recipes::TokenSampler({.top_p = 0}), Error);
}

recipes::GenerationLimits limits(int64_t max_new_tokens, std::vector<std::string> stop = {},
                                 std::vector<int32_t> end_ids = {}) {
  recipes::GenerationLimits l;
  l.max_new_tokens = max_new_tokens;
  l.stop = std::move(stop);
  l.end_ids = std::move(end_ids);
  return l;
}

// A random byte-level hybrid (vocabulary 256: bytes as tokens).
struct ByteModel {
  ParameterRegistry params;
  std::unique_ptr<layers::DecoderLM> model;
  recipes::ModelText text{"", 256};
  explicit ByteModel(uint64_t seed, const std::string& pattern = "*-GDN") {
    ModelConfig c = test::tiny_mixer_config(4, 2, int64_t(std::count(pattern.begin(), pattern.end(), '-') + 1));
    c.vocab_size = 256;
    c.layer_types = parse_hybrid_pattern(pattern, "test");
    c.swa.window_size = 3;  // shorter than the prompts
    c.validate("test");
    model = std::make_unique<layers::DecoderLM>(c, params);
    params.materialize(Device::cpu(), DType::F32, seed);
  }
  recipes::Completion run(const std::string& prompt, const recipes::GenerationLimits& limits,
                          const std::function<void(std::string_view)>& on_text = {}) {
    recipes::TokenSampler greedy({});
    return recipes::generate(*model, Device::cpu(), text, {text.encode(prompt)}, limits, greedy, on_text)[0];
  }
};

TEST(Generate, StopStringsAndEndTokensEndACompletion) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ByteModel m(seed);
  const recipes::Completion free = m.run("hello", limits(12));
  ASSERT_EQ(free.ids.size(), 12u);
  EXPECT_EQ(free.finish, "length");
  EXPECT_EQ(free.text, m.text.decode(free.ids));

  const std::string stop = free.text.substr(5, 2);
  std::string streamed;
  const recipes::Completion stopped =
      m.run("hello", limits(12, {"never there", stop}), [&](std::string_view s) { streamed += s; });
  EXPECT_EQ(stopped.text, free.text.substr(0, free.text.find(stop)));
  EXPECT_EQ(stopped.finish, "stop");
  EXPECT_EQ(streamed, stopped.text);

  const recipes::Completion ended = m.run("hello", limits(12, {}, {free.ids[3]}));
  const size_t at = size_t(std::find(free.ids.begin(), free.ids.end(), free.ids[3]) - free.ids.begin());
  EXPECT_EQ(ended.ids.size(), at + 1);
  EXPECT_EQ(ended.text, m.text.decode({free.ids.data(), at}));
  EXPECT_EQ(ended.finish, "stop");
}

TEST(Generate, BatchedPromptsDecodeAsTheyDoAlone) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ByteModel m(seed);
  recipes::TokenSampler greedy({});
  const std::vector<recipes::Completion> both = recipes::generate(
      *m.model, Device::cpu(), m.text, {m.text.encode("abcd"), m.text.encode("wxyz")}, limits(10), greedy);
  EXPECT_EQ(both[0].ids, m.run("abcd", limits(10)).ids);
  EXPECT_EQ(both[1].ids, m.run("wxyz", limits(10)).ids);
}

// Prompts of different lengths share a batch: each row's greedy tokens are those it gets alone, on a hybrid of full
// and sliding-window attention with recurrent mixers.
TEST(Generate, PromptsOfDifferentLengthsDecodeTogetherAsTheyDoAlone) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ByteModel m(seed, "*-M2-SWA-GDN");
  recipes::TokenSampler greedy({});
  const std::vector<std::string> prompts{"a", "the quick brown", "wxyz", "hello, world"};
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& p : prompts) ids.push_back(m.text.encode(p));
  const std::vector<recipes::Completion> batch =
      recipes::generate(*m.model, Device::cpu(), m.text, ids, limits(9), greedy);
  ASSERT_EQ(batch.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(batch[i].ids, m.run(prompts[i], limits(9)).ids) << prompts[i];
}

// The tiny recipe of the trainer's tests: 6 steps on the README as bytes, a checkpoint at step 6.
std::string write_recipe(const std::string& dir, uint64_t seed) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/run.yaml";
  std::ofstream(path) << "model_config: {vocab_size: 256, hidden_size: 32, intermediate_size: 64,\n"
                         "  num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8,\n"
                         "  max_position_embeddings: 64, tie_word_embeddings: true,\n"
                         "  model_type: hybrid_qwen3, hybrid_override_pattern: '*-M2'}\n"
                         "dataset: " PRIMER_SOURCE_DIR
                         "/README.md\n"
                         "cutoff_len: 32\nper_device_train_batch_size: 4\nlearning_rate: 3.0e-3\nmax_steps: 6\n"
                         "logging_steps: 1\neval_steps: 0\neval_batches: 3\nsave_steps: 6\ndevice: cpu\n"
                      << "seed: " << (seed % 100000) << "\noutput_dir: " << dir << "/out\n";
  return path;
}

TEST(ModelUse, EvalOfACheckpointGivesTheTrainersLossAndItsExportLoadsTheSameModel) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string root = ::testing::TempDir() + "/model-use-" + std::to_string(seed);
  std::filesystem::remove_all(root);
  ASSERT_EQ(recipes::run_train(write_recipe(root, seed), {}), 0);
  double logged = -1;
  std::ifstream metrics(root + "/out/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const json::Value v = json::parse(line, "metrics.jsonl");
    if (v.as_object().contains("eval_loss") && v.as_object().find("step")->as_int() == 6)
      logged = v.as_object().find("eval_loss")->as_double();
  }
  ASSERT_GT(logged, 0);
  recipes::EvalOptions options;
  options.model = root + "/out";
  const json::Value r = recipes::evaluate(options);
  EXPECT_NEAR(r.as_object().find("loss")->as_double(), logged, 1e-6 * logged);
  EXPECT_EQ(r.as_object().find("batches")->as_int(), 3);
  EXPECT_EQ(r.as_object().find("tokens")->as_int(), 3 * 4 * 32);

  // The checkpoint and a Hugging Face export of it decode alike.
  recipes::InferenceModel checkpoint = recipes::load_inference_model(root + "/out", Device::cpu(), DType::F32);
  EXPECT_TRUE(checkpoint.source.ends_with("checkpoint-6"));
  layers::export_hf(root + "/hf", checkpoint.config, *checkpoint.params, DType::F32);
  recipes::InferenceModel hf = recipes::load_inference_model(root + "/hf", Device::cpu(), DType::F32);
  const Tensor ids = test::rand_ints({1, 6}, seed + 1, 0, 256);
  layers::DecodeState a, b;
  test::expect_close(hf.model->decode(ids, b), checkpoint.model->decode(ids, a), 0, 0, "logits");
  // A Hugging Face model carries no data; --data then names the file.
  options.model = root + "/hf";
  EXPECT_THROW(recipes::evaluate(options), Error);
  options.data = PRIMER_SOURCE_DIR "/README.md";
  options.val_size = 0.5;
  options.cutoff_len = 16;
  options.batch_size = 2;
  options.max_batches = 2;
  const json::Value on_file = recipes::evaluate(options);
  EXPECT_EQ(on_file.as_object().find("tokens")->as_int(), 2 * 2 * 16);
  EXPECT_TRUE(std::isfinite(on_file.as_object().find("loss")->as_double()));
  std::filesystem::remove_all(root);
}

// `primer eval --data TEXT` for a model with a tokenizer scores the text's token ids (the tokenizer's, the file ended
// by its EOS, the last val_size held out), not its bytes.
TEST(ModelUse, EvalOfTextGoesThroughTheModelsTokenizer) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const test::tiny::ScratchDir dir("eval-tokenizer-" + std::to_string(seed));
  const data::Tokenizer tokenizer = test::tiny::load(dir);  // tokenizer.json beside the model
  ModelConfig c = test::tiny_mixer_config(4, 2, 2);
  c.vocab_size = tokenizer.vocab_size();
  c.qk_norm = true;  // as config.json's qwen3 reads back
  c.validate("test");
  {
    ParameterRegistry params;
    layers::DecoderLM model(c, params);
    params.materialize(Device::cpu(), DType::F32, seed);
    layers::export_hf(dir.path.string(), c, params, DType::F32);
  }
  std::string text;
  for (int i = 0; i < 30; ++i) text += "hello world, abc hello aabc world " + std::to_string(i) + "\n";
  recipes::EvalOptions options;
  options.model = dir.path.string();
  options.data = dir.write("text.txt", text);
  options.val_size = 0.5;
  options.cutoff_len = 8;
  options.batch_size = 2;
  const json::Value r = recipes::evaluate(options);

  // The reference: the held-out half of the token ids cut into consecutive [2, 8] rows, scored by the model.
  std::vector<int32_t> ids = tokenizer.encode(text, /*allow_special=*/false);
  ids.push_back(tokenizer.eos_id());
  const int64_t B = 2, T = 8, split = int64_t(double(ids.size()) * 0.5);
  const int64_t batches = (int64_t(ids.size()) - split - 1) / (B * T);
  ASSERT_GT(batches, 1);
  recipes::InferenceModel m = recipes::load_inference_model(dir.path.string(), Device::cpu(), DType::F32);
  ag::NoGrad no_grad;
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    const auto first = ids.begin() + ptrdiff_t(split + i * B * T);
    const std::vector<int32_t> x(first, first + B * T), y(first + 1, first + 1 + B * T);
    sum += m.model->loss(Tensor::from_vector(x, {B, T}, DType::I32), Tensor::from_vector(y, {B, T}, DType::I32), 1.0)
               ->value.to(DType::F64)
               .item();
  }
  const double expected = sum / double(batches * B * T);
  EXPECT_EQ(r.as_object().find("tokens")->as_int(), batches * B * T);
  EXPECT_NEAR(r.as_object().find("loss")->as_double(), expected, 1e-6 * expected);
  EXPECT_NE(r.as_object().find("data")->as_string().find("tokenizer"), std::string::npos);
}

}  // namespace
}  // namespace primer
