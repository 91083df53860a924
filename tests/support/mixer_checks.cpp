#include "tests/support/mixer_checks.h"

#include <algorithm>
#include <cmath>

#include "layers/decoder_lm.h"
#include "layers/hybrid_config.h"
#include "optim/adamw.h"

namespace primer::test {

ModelConfig tiny_mixer_config(int64_t q_heads, int64_t kv_heads, int64_t layers) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 13;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = layers;
  c.num_attention_heads = q_heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  return c;
}

void run_mixer_gradcheck(layers::SequenceMixer& mixer, ParameterRegistry& params, const Tensor& x,
                         const layers::MixerState& s0, const layers::MixerContext& ctx, uint64_t seed,
                         const std::vector<std::string>& unused) {
  const std::vector<Parameter*> all = params.all();
  const size_t convs = s0.conv.size(), recurrent = s0.recurrent.size();
  GradCheck check;
  check.inputs.push_back(x);
  check.names.push_back("x");
  for (size_t i = 0; i < convs; ++i) {
    check.inputs.push_back(s0.conv[i]->value);
    check.names.push_back("conv state " + std::to_string(i));
  }
  for (size_t i = 0; i < recurrent; ++i) {
    check.inputs.push_back(s0.recurrent[i]->value);
    check.names.push_back("recurrent state " + std::to_string(i));
  }
  const size_t first_param = check.inputs.size();
  for (Parameter* p : all) {
    check.inputs.push_back(randn(p->shape, seed ^ std::hash<std::string>{}(p->name), DType::F64, Device::cpu(), 0.5));
    check.names.push_back(p->name);
  }
  // Runs the layer from `in` (as leaves when `record`); returns the output and the final state's entries.
  auto run = [&](const std::vector<Tensor>& in, bool record, std::vector<ag::Var>* leaves) {
    for (size_t i = 0; i < all.size(); ++i) {
      all[i]->var->value = in[first_param + i];
      all[i]->var->grad = Tensor();
    }
    for (size_t i = 0; i < first_param; ++i) leaves->push_back(record ? ag::leaf(in[i]) : ag::constant(in[i]));
    layers::MixerState st_in, st_out;
    st_in.conv.assign(leaves->begin() + 1, leaves->begin() + 1 + ptrdiff_t(convs));
    st_in.recurrent.assign(leaves->begin() + 1 + ptrdiff_t(convs), leaves->begin() + ptrdiff_t(first_param));
    std::vector<ag::Var> outs{mixer.forward(leaves->at(0), ctx, &st_in, &st_out)};
    outs.insert(outs.end(), st_out.conv.begin(), st_out.conv.end());
    outs.insert(outs.end(), st_out.recurrent.begin(), st_out.recurrent.end());
    return outs;
  };
  check.forward = [&](const std::vector<Tensor>& in) {
    ag::NoGrad no_grad;
    std::vector<ag::Var> leaves;
    std::vector<Tensor> out;
    for (const ag::Var& v : run(in, false, &leaves)) out.push_back(v->value);
    return out;
  };
  check.backward = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& gout) {
    std::vector<ag::Var> leaves;
    const std::vector<ag::Var> outs = run(in, true, &leaves);
    for (size_t j = 0; j < outs.size(); ++j) outs[j]->grad = gout[j];
    ag::current_tape().backward();
    std::vector<Tensor> grads;
    for (const ag::Var& l : leaves) grads.push_back(l->grad);
    for (Parameter* p : all) grads.push_back(p->var->grad);
    for (size_t i = 0; i < grads.size(); ++i) {
      const bool expected = std::find(unused.begin(), unused.end(), check.names[i]) == unused.end();
      EXPECT_EQ(grads[i].defined(), expected) << check.names[i] << (expected ? " got no gradient" : " is unused");
    }
    return grads;
  };
  run_gradcheck(check, seed + 3);
}

void expect_decoding_matches_forward(layers::SequenceMixer& mixer, const Tensor& x, const layers::MixerState& s0,
                                     const layers::MixerContext& ctx, double tolerance) {
  ag::NoGrad no_grad;
  layers::MixerState full_state;
  const Tensor full = mixer.forward(ag::constant(x), ctx, &s0, &full_state)->value;
  layers::MixerState state = s0;
  for (int64_t t = 0; t < x.size(1); ++t) {
    // Each token sees its own position (RoPE mixers read it from the context).
    layers::MixerContext step = ctx;
    if (ctx.positions.defined()) step.positions = ctx.positions.slice(1, t, t + 1).contiguous();
    layers::MixerState next;
    const Tensor y = mixer.forward(ag::constant(x.slice(1, t, t + 1).contiguous()), step, &state, &next)->value;
    expect_close(y, full.slice(1, t, t + 1), tolerance, tolerance, "token " + std::to_string(t));
    state = next;
  }
  ASSERT_EQ(state.conv.size(), full_state.conv.size());
  for (size_t i = 0; i < state.conv.size(); ++i)
    expect_close(state.conv[i]->value, full_state.conv[i]->value, 0, 0, "conv state " + std::to_string(i));
  ASSERT_EQ(state.recurrent.size(), full_state.recurrent.size());
  for (size_t i = 0; i < state.recurrent.size(); ++i)
    expect_close(state.recurrent[i]->value, full_state.recurrent[i]->value, tolerance, tolerance,
                 "recurrent state " + std::to_string(i));
}

void expect_parameter_shapes(ParameterRegistry& params, const std::string& prefix,
                             const std::vector<std::pair<std::string, Shape>>& expected, bool exactly) {
  for (const auto& [name, shape] : expected) {
    if (!params.contains(prefix + name)) {
      ADD_FAILURE() << "no parameter " << prefix + name;
      continue;
    }
    EXPECT_EQ(params.get(prefix + name).shape, shape) << name;
  }
  if (!exactly) return;
  size_t registered = 0;
  for (Parameter* p : params.all()) registered += p->name.starts_with(prefix);
  EXPECT_EQ(registered, expected.size()) << "parameters under " << prefix;
}

void expect_ssm_decay_parameters(ParameterRegistry& params, const std::string& prefix) {
  for (const char* name : {"A_log", "dt_bias"}) {
    EXPECT_TRUE(params.get(prefix + name).keep_f32) << name;
    EXPECT_FALSE(params.get(prefix + name).weight_decay) << name;
  }
  params.materialize(Device::cpu(), DType::BF16, 5);
  EXPECT_EQ(params.get(prefix + "A_log").var->value.dtype(), DType::F32);
  for (float a : params.get(prefix + "A_log").master.to_vector<float>()) EXPECT_LE(std::exp(a), 16.0f + 1e-4f);
  for (float b : params.get(prefix + "dt_bias").master.to_vector<float>()) {
    const double dt = std::log1p(std::exp(double(b)));
    EXPECT_GE(dt, 1e-4 * (1 - 1e-5));
    EXPECT_LE(dt, 0.1 * (1 + 1e-5));
  }
}

ModelConfig small_hybrid(ModelConfig c, const std::string& pattern) {
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.head_dim = 8;
  if (!pattern.empty()) c.layer_types = parse_hybrid_pattern(pattern, "test");
  c.validate("test");
  return c;
}

void expect_hybrid_decoder_learns(const ModelConfig& c, double fraction, uint64_t seed) {
  ParameterRegistry params;
  layers::DecoderLM model(c, params);
  params.materialize(Device::cpu(), DType::F32, seed);
  optim::AdamW adamw(params, {});
  const int64_t B = 4, T = 24;
  const Tensor ids = rand_ints({B, T}, seed + 1, 0, c.vocab_size),
               targets = rand_ints({B, T}, seed + 2, 0, c.vocab_size);
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step) {
    params.zero_grads();
    const ag::Var loss = model.loss(ids, targets, 1.0 / double(B * T));
    losses.push_back(loss->value.to(DType::F64).item() / double(B * T));
    ag::backward(loss);
    adamw.step(1e-2);
  }
  EXPECT_TRUE(std::isfinite(losses.back()));
  EXPECT_LT(losses.back(), fraction * losses.front()) << "first " << losses.front() << ", last " << losses.back();
  EXPECT_GT(model.flops_per_token(T), 0);
}

}  // namespace primer::test
