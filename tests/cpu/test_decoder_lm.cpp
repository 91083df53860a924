// The Transformer decoder end to end in f64 (every parameter gradient against finite differences, for a Qwen3
// with QK-norm and tied embeddings, a Llama with untied head and Llama-3 RoPE scaling, a Mistral with a sliding
// window),
// recomputation equivalence, and the Hugging Face export → import round trip.
#include <gtest/gtest.h>

#include <filesystem>

#include "layers/decoder_lm.h"
#include "layers/hf_checkpoint.h"
#include "layers/hybrid_config.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

ModelConfig tiny(const std::string& type) {
  ModelConfig c;
  c.model_type = type;
  c.vocab_size = 13;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  if (type == "qwen3") {
    c.qk_norm = true;
    c.tie_word_embeddings = true;
    c.rope_theta = 1e6;
  } else if (type == "llama") {
    c.rope_scaling.type = RopeScaling::Type::Llama3;
    c.rope_scaling.factor = 8;
    c.rope_scaling.original_max_position_embeddings = 16;
  } else {  // mistral: sliding-window attention in every layer
    c.sliding_window = 3;
  }
  return c;
}

class DecoderGradients : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderGradients, EveryParameterMatchesFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ParameterRegistry params;
  layers::DecoderLM model(tiny(GetParam()), params);
  params.materialize(Device::cpu(), DType::F64, seed);
  const Tensor ids = test::rand_ints({2, 5}, seed + 1, 0, 13);
  std::vector<int32_t> t = test::rand_ints({2, 5}, seed + 2, 0, 13).to_vector<int32_t>();
  t[7] = -100;
  const Tensor targets = Tensor::from_vector(t, {2, 5}, DType::I32);

  test::run_model_gradcheck(
      params, [&](double scale) { return model.loss(ids, targets, scale); }, seed);
}

INSTANTIATE_TEST_SUITE_P(QwenAndLlama, DecoderGradients, ::testing::Values("qwen3", "llama", "mistral"));

// Whole blocks recomputed, or all but attention's, the GKA solve's, the GLA readouts' and the gated delta rule's
// results (kept from the first forward): the same ops on the same inputs, so the same gradients to the last bit, in a
// Transformer and a hybrid.
TEST(DecoderLM, RecomputationGivesIdenticalGradients) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ModelConfig hybrid = tiny("qwen3");
  hybrid.num_hidden_layers = 4;
  hybrid.layer_types = parse_hybrid_pattern("*-GKA-M2-GDN", "test");
  for (const ModelConfig& config : {tiny("qwen3"), hybrid}) {
    SCOPED_TRACE(format_hybrid_pattern(config.layer_types));
    auto grads = [&](layers::DecoderOptions options) {
      ParameterRegistry params;
      layers::DecoderLM model(config, params, options);
      params.materialize(Device::cpu(), DType::F32, seed);
      ag::backward(
          model.loss(test::rand_ints({2, 9}, seed + 1, 0, 13), test::rand_ints({2, 9}, seed + 2, 0, 13), 1.0 / 18));
      std::vector<std::vector<float>> out;
      for (Parameter* p : params.all()) out.push_back(p->var->grad.to_vector<float>());
      return out;
    };
    const auto kept = grads({.recompute = false});
    EXPECT_EQ(grads({.recompute = true, .selective_recompute = true}), kept);
    EXPECT_EQ(grads({.recompute = true, .selective_recompute = false}), kept);
    // A budget that holds some of the kept results: the later blocks recompute theirs.
    EXPECT_EQ(grads({.recompute = true, .selective_recompute = true, .selective_recompute_budget_bytes = 4000}), kept);
  }
}

TEST(DecoderLM, ExportThenImportReproducesLogits) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string dir = testing::TempDir() + "/primer-export-" + std::to_string(seed);
  for (const char* type : {"qwen3", "llama", "mistral"}) {
    SCOPED_TRACE(type);
    const ModelConfig config = tiny(type);
    ParameterRegistry a;
    layers::DecoderLM model_a(config, a);
    a.materialize(Device::cpu(), DType::F32, seed);
    layers::export_hf(dir, config, a, DType::F32, 2048);  // small shards: exercises the index
    ParameterRegistry b;
    ModelConfig loaded = load_hf_config(dir + "/config.json");
    loaded.torch_dtype = config.torch_dtype;  // the export records the dtype it wrote
    EXPECT_EQ(loaded, config) << json::dump(to_hf_json(loaded), 1) << "\n" << json::dump(to_hf_json(config), 1);
    layers::DecoderLM model_b(loaded, b);
    b.materialize(Device::cpu(), DType::F32, seed + 1);  // different init, overwritten by the import
    layers::load_hf_weights(dir, b);
    const Tensor ids = test::rand_ints({2, 7}, seed + 2, 0, 13);
    EXPECT_EQ(model_a.logits(ids).to_vector<float>(), model_b.logits(ids).to_vector<float>());
    std::filesystem::remove_all(dir);
  }
}

TEST(DecoderLM, ImportNamesMissingAndMisshapedTensors) {
  const uint64_t seed = test::fresh_seed();
  const std::string dir = testing::TempDir() + "/primer-export-bad-" + std::to_string(seed);
  ModelConfig small = tiny("llama");
  ParameterRegistry a;
  layers::DecoderLM model_a(small, a);
  a.materialize(Device::cpu(), DType::F32, seed);
  layers::export_hf(dir, small, a, DType::BF16);
  ModelConfig bigger = small;
  bigger.intermediate_size = 16;
  bigger.num_hidden_layers = 3;
  ParameterRegistry b;
  layers::DecoderLM model_b(bigger, b);
  b.materialize(Device::cpu(), DType::F32, seed);
  try {
    layers::load_hf_weights(dir, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.layers.2.mlp.up_proj.weight"), std::string::npos) << m;  // missing
    EXPECT_NE(m.find("model.layers.0.mlp.up_proj.weight (checkpoint [12, 8], model [16, 8])"), std::string::npos) << m;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace primer
