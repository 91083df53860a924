#include "layers/short_conv_lm.h"

#include <cmath>

#include "core/autograd/checkpoint.h"
#include "core/autograd/functions.h"

namespace primer::layers {
namespace {
std::string layer_name(int64_t i, const std::string& leaf) { return "model.layers." + std::to_string(i) + "." + leaf; }
}  // namespace

ShortConvLM::ShortConvLM(const ShortConvLMConfig& c, ParameterRegistry& params) : config_(c), params_(params) {
  const double std = 0.02;
  const double out_std = std / std::sqrt(2.0 * double(c.layers));  // residual-branch outputs scaled by depth
  params.add("model.embed_tokens.weight", {c.vocab, c.hidden}, InitRule::normal(std));
  for (int64_t i = 0; i < c.layers; ++i) {
    params.add(layer_name(i, "input_layernorm.weight"), {c.hidden}, InitRule::constant(1.0), false);
    params.add(layer_name(i, "conv.conv1d.weight"), {c.hidden, c.conv_size},
               InitRule::uniform(-1.0 / std::sqrt(double(c.conv_size)), 1.0 / std::sqrt(double(c.conv_size))));
    params.add(layer_name(i, "conv.conv1d.bias"), {c.hidden}, InitRule::constant(0.0), false);
    params.add(layer_name(i, "conv.out_proj.weight"), {c.hidden, c.hidden}, InitRule::normal(out_std));
    params.add(layer_name(i, "post_attention_layernorm.weight"), {c.hidden}, InitRule::constant(1.0), false);
    params.add(layer_name(i, "mlp.gate_proj.weight"), {c.ffn, c.hidden}, InitRule::normal(std));
    params.add(layer_name(i, "mlp.up_proj.weight"), {c.ffn, c.hidden}, InitRule::normal(std));
    params.add(layer_name(i, "mlp.down_proj.weight"), {c.hidden, c.ffn}, InitRule::normal(out_std));
  }
  params.add("model.norm.weight", {c.hidden}, InitRule::constant(1.0), false);
}

ag::Var ShortConvLM::block(int64_t i, const ag::Var& h) {
  const double eps = config_.norm_eps;
  ag::Var a = ag::rmsnorm(h, weight(layer_name(i, "input_layernorm.weight")), eps);
  a = ag::causal_conv1d(a, weight(layer_name(i, "conv.conv1d.weight")), weight(layer_name(i, "conv.conv1d.bias")),
                        true);
  ag::Var x = ag::add(h, ag::linear(a, weight(layer_name(i, "conv.out_proj.weight"))));
  ag::Var m = ag::rmsnorm(x, weight(layer_name(i, "post_attention_layernorm.weight")), eps);
  ag::Var s = ag::swiglu(ag::linear(m, weight(layer_name(i, "mlp.gate_proj.weight"))),
                         ag::linear(m, weight(layer_name(i, "mlp.up_proj.weight"))));
  return ag::add(x, ag::linear(s, weight(layer_name(i, "mlp.down_proj.weight"))));
}

ag::Var ShortConvLM::loss(const Tensor& ids, const Tensor& targets, double grad_scale) {
  const ag::Var embed = weight("model.embed_tokens.weight");
  ag::Var h = ag::embedding(embed, ids);  // [B, T, D]
  for (int64_t i = 0; i < config_.layers; ++i) {
    if (config_.recompute) {
      h = ag::checkpoint("block " + std::to_string(i),
                         [this, i](const std::vector<ag::Var>& in) { return std::vector<ag::Var>{block(i, in[0])}; },
                         {h})[0];
    } else {
      h = block(i, h);
    }
  }
  h = ag::rmsnorm(h, weight("model.norm.weight"), config_.norm_eps);
  h = ag::reshape(h, {-1, config_.hidden});
  return ag::fused_linear_cross_entropy(h, embed, targets.reshape({-1}), -100, grad_scale);
}

double ShortConvLM::flops_per_token() const {
  const double d = double(config_.hidden), f = double(config_.ffn), v = double(config_.vocab);
  const double per_layer = d * d + 3 * d * f;
  return 6.0 * (double(config_.layers) * per_layer + d * v);
}

}  // namespace primer::layers
