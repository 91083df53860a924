// Hugging Face config.json: representative Qwen3 / Llama-3.1 / Mistral configs in transformers-4 and -5
// spellings, the round trip through to_hf_json, errors naming file and key, validation, and the default and
// Llama-3 scaled RoPE inverse frequencies against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/check.h"
#include "core/ops/rope.h"
#include "layers/model_config.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using test::expect_error;

ModelConfig parse(const std::string& text) { return from_hf_json(json::parse(text, "config.json"), "config.json"); }

// Qwen3-0.6B as released (transformers 4.51).
const char* kQwen3V4 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
  "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
  "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

// The same model saved by transformers 5: rope_parameters, dtype.
const char* kQwen3V5 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "bos_token_id": 151643, "dtype": "bfloat16",
  "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3072,
  "layer_types": ["full_attention"], "max_position_embeddings": 40960, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_window": null,
  "tie_word_embeddings": true, "use_sliding_window": false, "vocab_size": 151936})";

// Llama-3.1-8B as released.
const char* kLlamaV4 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
  "vocab_size": 128256})";

const char* kLlamaV5 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000, "dtype": "bfloat16",
  "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
  "tie_word_embeddings": false, "vocab_size": 128256})";

// Mistral-7B-v0.1 as released (no head_dim, sliding window 4096).
const char* kMistralV4 = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.34.0", "use_cache": true, "vocab_size": 32000})";

const char* kMistralV5 = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "dtype": "bfloat16",
  "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
  "sliding_window": 4096, "tie_word_embeddings": false, "vocab_size": 32000})";

TEST(ModelConfig, Qwen3BothSpellings) {
  const ModelConfig c = parse(kQwen3V4);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.head_dim, 128);  // given, not hidden/heads = 64
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(c.torch_dtype, DType::BF16);
  EXPECT_EQ(parse(kQwen3V5), c);
}

TEST(ModelConfig, Llama31BothSpellings) {
  const ModelConfig c = parse(kLlamaV4);
  EXPECT_EQ(c.head_dim, 128);  // hidden / heads
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Llama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(parse(kLlamaV5), c);
  // Old files spell the type key "type".
  std::string old = kLlamaV4;
  old.replace(old.find("\"rope_type\""), 11, "\"type\"");
  EXPECT_EQ(parse(old), c);
}

TEST(ModelConfig, MistralBothSpellings) {
  const ModelConfig c = parse(kMistralV4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(parse(kMistralV5), c);
}

TEST(ModelConfig, RoundTripThroughToHfJson) {
  for (const char* text : {kQwen3V4, kLlamaV4, kMistralV4}) {
    const ModelConfig c = parse(text);
    const json::Value j = to_hf_json(c);
    const json::Node n(j, "out");
    EXPECT_EQ(n.at("architectures").at(size_t(0)).as_string(),
              json::Node(json::parse(text, "in"), "in").at("architectures").at(size_t(0)).as_string());
    EXPECT_EQ(from_hf_json(json::parse(json::dump(j, 2), "written"), "written"), c) << json::dump(j, 2);
  }
  const json::Value llama = to_hf_json(parse(kLlamaV4));
  EXPECT_EQ(json::Node(llama, "out").at("rope_scaling").at("rope_type").as_string(), "llama3");
  EXPECT_EQ(json::Node(llama, "out").at("eos_token_id").size(), 3u);
}

TEST(ModelConfig, ErrorsNameFileAndKey) {
  auto with = [](std::string text, const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  expect_error([&] { parse(with(kLlamaV4, "\"factor\": 8.0", "\"factor\": \"8\"")); },
               {"config.json: key \"rope_scaling.factor\": expected a number, got string"});
  expect_error([&] { parse(with(kLlamaV5, "\"low_freq_factor\": 1.0,", "")); },
               {"config.json: missing key \"rope_parameters.low_freq_factor\""});
  expect_error([&] { parse(with(kLlamaV4, "\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\"")); },
               {"key \"rope_scaling.rope_type\"", "unsupported rope_type 'yarn'"});
  expect_error([&] { parse(with(kQwen3V4, "\"vocab_size\": 151936", "\"vocab\": 151936")); },
               {"config.json: missing key \"vocab_size\""});
  expect_error([&] { parse(with(kQwen3V4, "\"model_type\": \"qwen3\"", "\"model_type\": \"gemma\"")); },
               {"key \"model_type\"", "unsupported model_type 'gemma'"});
  // A hybrid's keys with a plain model_type would otherwise build a Transformer silently.
  expect_error(
      [&] {
        parse(with(kQwen3V4, "\"model_type\": \"qwen3\"",
                   "\"model_type\": \"qwen3\", \"hybrid_override_pattern\": \"GKA-*\""));
      },
      {"key \"hybrid_override_pattern\"", "model_type is 'qwen3'", "hybrid_qwen3"});
  expect_error(
      [&] { parse(with(kQwen3V4, "\"model_type\": \"qwen3\"", "\"model_type\": \"qwen3\", \"gka_config\": {}")); },
      {"key \"gka_config\"", "a hybrid's key"});
  expect_error([&] { parse(with(kQwen3V4, "\"num_hidden_layers\": 28", "\"num_hidden_layers\": 2.5")); },
               {"key \"num_hidden_layers\": expected an integer, got 2.5"});
  expect_error([&] { parse(with(kQwen3V4, "\"use_sliding_window\": false", "\"use_sliding_window\": true")); },
               {"key \"use_sliding_window\"", "not supported"});
  expect_error([&] { parse(with(kQwen3V4, "\"torch_dtype\": \"bfloat16\"", "\"torch_dtype\": \"int4\"")); },
               {"key \"torch_dtype\": expected bfloat16, float32 or float16, got 'int4'"});
  expect_error([&] { parse(with(kLlamaV4, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"")); },
               {"key \"hidden_act\"", "unsupported activation 'gelu'"});
  expect_error([&] { parse(with(kMistralV4, "\"hidden_size\": 4096", "\"hidden_size\": 4001")); },
               {"key \"num_attention_heads\"", "does not divide hidden_size 4001"});
  expect_error([&] { parse(with(kMistralV4, "\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5")); },
               {"config.json: num_attention_heads (32) must be a multiple of num_key_value_heads (5)"});
  expect_error([&] { parse(with(kQwen3V4, "\"head_dim\": 128", "\"head_dim\": 127")); },
               {"config.json: head_dim is 127", "even"});
  expect_error([&] { parse(with(kQwen3V4, "\"eos_token_id\": 151645", "\"eos_token_id\": 151936")); },
               {"eos_token_id 151936 is outside the vocabulary [0, 151936)"});
  expect_error([&] { parse(with(kLlamaV4, "\"high_freq_factor\": 4.0", "\"high_freq_factor\": 0.5")); },
               {"low_freq_factor 1 and high_freq_factor 0.5"});
}

TEST(ModelConfig, DefaultRopeMatchesTheOpLibrary) {
  const ModelConfig c = parse(kQwen3V4);
  EXPECT_EQ(rope_inv_freq_for(c).to_vector<float>(), ops::rope_inv_freq(128, 1e6).to_vector<float>());
}

// Llama-3 scaling on a small head (head_dim 16, theta 500000, factor 8, low 1, high 4, context 8192) worked by
// hand: inv_i = 500000^(-i/8), wavelength 2π/inv_i = 6.28, 32.4, 167, 862, 4443, 22912, ... The thresholds
// are 8192/4 = 2048 and 8192/1 = 8192, so i = 0..3 keep their frequency, i = 5..7 are divided by 8, and
// i = 4 (wavelength 2π·sqrt(500000) = 4442.9) is blended with smooth = (8192/4442.9 − 1)/3 = 0.28128:
// inv_4 · ((1 − smooth)/8 + smooth) = 0.0014142 · 0.37112 = 5.2484e-4.
TEST(ModelConfig, Llama3ScaledInverseFrequencies) {
  ModelConfig c = parse(kLlamaV4);
  c.head_dim = 16;
  const std::vector<float> scaled = rope_inv_freq_for(c).to_vector<float>();
  const std::vector<float> plain = ops::rope_inv_freq(16, 500000.0).to_vector<float>();
  ASSERT_EQ(scaled.size(), 8u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(scaled[i], plain[i]) << i;      // high frequency: unchanged
  for (int i = 5; i < 8; ++i) EXPECT_EQ(scaled[i], plain[i] / 8) << i;  // low frequency: /8 is exact in f32
  const double inv4 = 1 / std::sqrt(500000.0);
  const double smooth = (8192 / (2 * std::numbers::pi / inv4) - 1) / 3;
  EXPECT_NEAR(smooth, 0.28128, 1e-5);
  EXPECT_EQ(scaled[4], float(inv4 * ((1 - smooth) / 8 + smooth)));  // one rounding of the double result
  EXPECT_NEAR(scaled[4], 5.2484e-4, 1e-8);                          // the hand value, to its 5 digits
  // With a 4-token original context every wavelength (>= 6.28) is above both thresholds: all divided.
  c.rope_scaling.original_max_position_embeddings = 4;
  const std::vector<float> all_low = rope_inv_freq_for(c).to_vector<float>();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(all_low[i], plain[i] / 8) << i;
}

}  // namespace
}  // namespace primer
