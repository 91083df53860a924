// The Stage 1 fused teacher-student decoder: parameters of both streams under the reference's names, the teacher
// stream equal to the source Transformer, and the distillation loss's gradients (checked by finite differences
// with the teacher's output held fixed, as the reference detaches it).
#include <gtest/gtest.h>

#include "core/autograd/functions.h"
#include "layers/decoder_lm.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

ModelConfig tiny_qwen3(int64_t layers) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 13, c.hidden_size = 8, c.intermediate_size = 12, c.num_hidden_layers = layers;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 4, c.max_position_embeddings = 64;
  c.qk_norm = true, c.tie_word_embeddings = true;
  return c;
}

// Student SWA layers stand in for any student mixer: the fused machinery does not depend on the kind.
ModelConfig fused_config() {
  ModelConfig c = tiny_qwen3(3);
  const HybridPattern p = parse_any_hybrid_pattern("*DA-SWA*-*DA", "test");
  c.layer_types = p.layers;
  c.fused = p.fused;
  c.swa.window_size = 2;
  return c;
}

TEST(FusedDecoder, RegistersTeacherAttentionNextToTheStudentMixer) {
  ParameterRegistry params;
  layers::DecoderLM model(fused_config(), params);
  EXPECT_TRUE(params.contains("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE(params.contains("model.layers.0.swa.q_proj.weight"));
  EXPECT_TRUE(params.contains("model.layers.1.self_attn.q_proj.weight"));  // the frozen teacher
  EXPECT_TRUE(params.contains("model.layers.1.swa.q_proj.weight"));        // the student
}

TEST(FusedDecoder, TeacherStreamIsTheSourceTransformer) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ParameterRegistry fused_params, plain_params;
  layers::DecoderLM fused(fused_config(), fused_params);
  layers::DecoderLM plain(tiny_qwen3(3), plain_params);
  fused_params.materialize(Device::cpu(), DType::F64, seed);
  plain_params.materialize(Device::cpu(), DType::F64, seed + 1);
  for (Parameter* p : plain_params.all()) p->var->value = fused_params.get(p->name).var->value;
  const Tensor ids = test::rand_ints({2, 7}, seed + 2, 0, 13);
  const auto targets = fused.teacher_targets(ids, {true, true});
  ag::NoGrad no_grad;
  test::expect_close(targets.final_hidden, plain.hidden_states(ids)->value, 0, 0, "teacher stream");
  EXPECT_EQ(targets.layers.size(), 3u);
  // The student stream differs (its SWA layer sees a window of 2).
  EXPECT_GT(test::compare(fused.hidden_states(ids)->value, targets.final_hidden).rel_l2, 1e-3);
}

TEST(FusedDecoder, DistillLossGradientsMatchFiniteDifferencesWithTheTeacherFixed) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  {
    const bool layerwise = true;  // both terms: the final-norm MSE and the per-layer ones
    ParameterRegistry params;
    ModelConfig c = fused_config();
    c.num_hidden_layers = 2;  // "*DA-SWA*": one layer of each fused kind keeps the check fast
    c.layer_types.pop_back();
    layers::DecoderLM model(c, params);
    params.materialize(Device::cpu(), DType::F64, seed);
    const std::vector<Parameter*> all = params.all();
    test::GradCheck check;
    for (Parameter* p : all) {  // redrawn so that norm weights are not all ones
      p->var->value = test::randn(p->shape, seed ^ std::hash<std::string>{}(p->name), DType::F64, Device::cpu(), 0.5);
      check.inputs.push_back(p->var->value);
      check.names.push_back(p->name);
    }
    const Tensor ids = test::rand_ints({1, 5}, seed + 1, 0, 13);
    const layers::DistillOptions opt{true, layerwise};
    // The teacher's targets at the base point, held fixed: the reference detaches them, so the loss's gradient is
    // the student path's alone (teacher-only weights get none).
    const auto targets = model.teacher_targets(ids, opt);
    auto set_values = [&](const std::vector<Tensor>& in) {
      for (size_t k = 0; k < all.size(); ++k) all[k]->var->value = in[k];
    };
    check.forward = [&](const std::vector<Tensor>& in) {
      set_values(in);
      ag::NoGrad no_grad;
      return std::vector<Tensor>{model.distill_loss(ids, targets, opt)->value};
    };
    check.backward = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& g) {
      set_values(in);
      for (Parameter* p : all) p->var->grad = Tensor();
      ag::backward(model.distill_loss(ids, targets, opt), g[0]);
      std::vector<Tensor> grads;
      for (Parameter* p : all) grads.push_back(p->var->grad);
      return grads;
    };
    test::run_gradcheck(check, seed + 2);
    EXPECT_FALSE(params.get("model.layers.1.self_attn.q_proj.weight").var->grad.defined());
    EXPECT_TRUE(params.get("model.layers.1.swa.q_proj.weight").var->grad.defined());
  }
}

TEST(FusedDecoder, ConvenienceLossEqualsTheTwoStepOne) {
  const uint64_t seed = test::fresh_seed();
  ParameterRegistry params;
  layers::DecoderLM model(fused_config(), params);
  params.materialize(Device::cpu(), DType::F64, seed);
  const Tensor ids = test::rand_ints({2, 6}, seed + 1, 0, 13);
  ag::NoGrad no_grad;
  const layers::DistillOptions opt{true, true};
  EXPECT_EQ(model.distill_loss(ids, opt)->value.item(),
            model.distill_loss(ids, model.teacher_targets(ids, opt), opt)->value.item());
  test::expect_error([&] { model.teacher_targets(ids, {false, false}); }, {"nothing to match"});
}

}  // namespace
}  // namespace primer
