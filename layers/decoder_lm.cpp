#include "layers/decoder_lm.h"

#include <algorithm>

#include "core/autograd/functions.h"
#include "core/autograd/slicing.h"
#include "core/ops/gemm.h"
#include "layers/mixer_factory.h"

namespace primer::layers {
namespace {
std::string layer_name(size_t i, const std::string& leaf) { return "model.layers." + std::to_string(i) + "." + leaf; }

// The teacher attention that a fused model keeps next to a student mixer, under the reference's `self_attn`.
std::unique_ptr<SequenceMixer> make_teacher_attention(const ModelConfig& c, int64_t layer, ParameterRegistry& params) {
  ModelConfig attention = c;
  attention.layer_types.clear();
  attention.fused = false;
  return make_mixer(attention, layer, params);
}

// first[b]..first[b]+T-1 in row b (first empty: 0..T-1 in every row).
Tensor default_positions(int64_t B, int64_t T, Device device, const std::vector<int64_t>& first = {}) {
  std::vector<int32_t> p(size_t(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) p[size_t(b * T + t)] = int32_t((first.empty() ? 0 : first[size_t(b)]) + t);
  return Tensor::from_vector(p, {B, T}, DType::I32, device);
}
}  // namespace

DecoderLM::DecoderLM(const ModelConfig& c, ParameterRegistry& params, DecoderOptions options)
    : config_(c), params_(params), options_(options) {
  config_.validate();
  if (options.selective_recompute_budget_bytes >= 0)
    keep_budget_ = std::make_shared<ag::KeepBudget>(size_t(options.selective_recompute_budget_bytes));
  PRIMER_CHECK(!c.attention_bias, "{} models with attention_bias are not supported yet", c.model_type);
  const double std = c.initializer_range;
  // Every parameter registered between two marks belongs to one unit (units()).
  size_t mark = params.all().size();
  auto close_unit = [&] {
    std::vector<std::string> names;
    const std::vector<Parameter*> all = params.all();
    for (size_t k = mark; k < all.size(); ++k) names.push_back(all[k]->name);
    unit_parameters_.push_back(std::move(names));
    mark = all.size();
  };
  params.add("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, InitRule::normal(std));
  close_unit();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const size_t l = size_t(i);
    params.add(layer_name(l, "input_layernorm.weight"), {c.hidden_size}, InitRule::constant(1.0), false);
    const bool separate_teacher = c.fused && c.mixer(i) != MixerKind::Attention;
    teachers_.push_back(separate_teacher ? make_teacher_attention(c, i, params) : nullptr);
    mixers_.push_back(make_mixer(c, i, params));
    params.add(layer_name(l, "post_attention_layernorm.weight"), {c.hidden_size}, InitRule::constant(1.0), false);
    params.add(layer_name(l, "mlp.gate_proj.weight"), {c.intermediate_size, c.hidden_size}, InitRule::normal(std));
    params.add(layer_name(l, "mlp.up_proj.weight"), {c.intermediate_size, c.hidden_size}, InitRule::normal(std));
    params.add(layer_name(l, "mlp.down_proj.weight"), {c.hidden_size, c.intermediate_size}, InitRule::normal(std));
    close_unit();
  }
  params.add("model.norm.weight", {c.hidden_size}, InitRule::constant(1.0), false);
  if (!c.tie_word_embeddings) params.add("lm_head.weight", {c.vocab_size, c.hidden_size}, InitRule::normal(std));
  close_unit();
  inv_freq_cpu_ = rope_inv_freq_for(c);
}

std::vector<ag::UnitSpec> DecoderLM::units() const {
  std::vector<ag::UnitSpec> out;
  for (const auto& names : unit_parameters_) out.push_back({names, false});
  out.back().gradient_in_forward = true;  // the fused cross-entropy computes the head's gradient in its forward
  if (config_.tie_word_embeddings) out.front().gradient_in_forward = true;
  return out;
}

ag::Var DecoderLM::in_head_unit(const ag::Var& x, const std::function<ag::Var(const ag::Var&)>& fn) {
  ag::UnitHooks* hooks = options_.hooks;
  const size_t head = unit_parameters_.size() - 1;
  if (!config_.tie_word_embeddings) return ag::run_unit(hooks, head, x, fn);
  return ag::run_unit(hooks, head, x, [&](const ag::Var& in) { return ag::run_unit(hooks, 0, in, fn); });
}

ag::Var DecoderLM::final_norm(const ag::Var& h) {
  return in_head_unit(
      h, [this](const ag::Var& x) { return ag::rmsnorm(x, weight("model.norm.weight"), config_.rms_norm_eps); });
}

std::string DecoderLM::head_name() const {
  return config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
}

ag::Var DecoderLM::block(size_t i, const ag::Var& h, const MixerContext& ctx, SequenceMixer& mixer,
                         const MixerState* state_in, MixerState* state_out) {
  const double eps = config_.rms_norm_eps;
  ag::Var a = ag::rmsnorm(h, weight(layer_name(i, "input_layernorm.weight")), eps);
  ag::Var x = ag::add(h, state_out ? mixer.forward(a, ctx, state_in, state_out) : mix_sequence(mixer, a, ctx));
  ag::Var m = ag::rmsnorm(x, weight(layer_name(i, "post_attention_layernorm.weight")), eps);
  ag::Var s = ag::swiglu(ag::linear(m, weight(layer_name(i, "mlp.gate_proj.weight"))),
                         ag::linear(m, weight(layer_name(i, "mlp.up_proj.weight"))));
  // The projections back into the residual stream keep their outputs for a recompute (ag::linear_kept).
  return ag::add(x, ag::linear_kept(s, weight(layer_name(i, "mlp.down_proj.weight"))));
}

MixerContext DecoderLM::context(const Tensor& ids, const Tensor& positions) const {
  PRIMER_CHECK(ids.dim() == 2 && ids.dtype() == DType::I32, "input ids must be i32 [B, T], got {}", ids.describe());
  const Device device = ids.device();
  MixerContext ctx;
  ctx.sequence = options_.sequence;
  PRIMER_CHECK(!ctx.sequence || positions.defined(),
               "under sequence parallelism the model needs each token's global position (a rank holds part of a row)");
  ctx.positions = positions.defined() ? positions : default_positions(ids.size(0), ids.size(1), device);
  ctx.inv_freq = inv_freq_cpu_.to(device);
  if (ctx.sequence) {
    const bool usp = std::any_of(mixers_.begin(), mixers_.end(), [&](const auto& m) {
      return !m->runs_sequence_parallel(ctx.sequence->recurrent_mode());
    });
    if (usp) ctx.whole_positions = ctx.sequence->gather_positions(ctx.positions);
  }
  return ctx;
}

ag::Var DecoderLM::stream(const Tensor& ids, const MixerContext& ctx, bool teacher,
                          std::vector<ag::Var>* layer_outputs) {
  ag::Var h = ag::run_unit(options_.hooks, 0, nullptr,
                           [&](const ag::Var&) { return ag::embedding(weight("model.embed_tokens.weight"), ids); });
  for (size_t i = 0; i < mixers_.size(); ++i) {
    SequenceMixer* mixer = teacher && teachers_[i] ? teachers_[i].get() : mixers_[i].get();
    h = ag::run_unit(options_.hooks, 1 + i, h, [&](const ag::Var& x) {
      if (!options_.recompute) return block(i, x, ctx, *mixer);
      return ag::checkpoint(
          "block " + std::to_string(i),
          [this, i, ctx, mixer](const std::vector<ag::Var>& in) {
            return std::vector<ag::Var>{block(i, in[0], ctx, *mixer)};
          },
          {x}, ag::KeepPolicy(options_.selective_recompute, keep_budget_))[0];
    });
    if (layer_outputs) layer_outputs->push_back(h);
  }
  return h;
}

ag::Var DecoderLM::hidden_states(const Tensor& ids, const Tensor& positions) {
  return final_norm(stream(ids, context(ids, positions), false, nullptr));
}

Tensor DecoderLM::decode(const Tensor& ids, DecodeState& state) {
  PRIMER_CHECK(!options_.sequence, "decoding does not run under sequence parallelism");
  if (state.layers.empty()) state.layers.resize(mixers_.size());
  PRIMER_CHECK(state.layers.size() == mixers_.size(), "decode: the state holds {} layers, the model has {}",
               state.layers.size(), mixers_.size());
  ag::NoGrad no_grad;
  const int64_t B = ids.size(0), T = ids.size(1);
  if (state.tokens.empty()) state.tokens.assign(size_t(B), 0);
  PRIMER_CHECK(int64_t(state.tokens.size()) == B, "decode: the state holds {} rows, the input {}", state.tokens.size(),
               B);
  const MixerContext ctx = context(ids, default_positions(B, T, ids.device(), state.tokens));
  ag::Var h = ag::run_unit(options_.hooks, 0, nullptr,
                           [&](const ag::Var&) { return ag::embedding(weight("model.embed_tokens.weight"), ids); });
  for (size_t i = 0; i < mixers_.size(); ++i) {
    MixerState next;
    h = ag::run_unit(options_.hooks, 1 + i, h,
                     [&](const ag::Var& x) { return block(i, x, ctx, *mixers_[i], &state.layers[i], &next); });
    state.layers[i] = std::move(next);
  }
  for (int64_t& seen : state.tokens) seen += T;
  const ag::Var last = final_norm(ag::constant(h->value.slice(1, T - 1, T).contiguous()));
  return in_head_unit(
             last,
             [&](const ag::Var& x) {
               return ag::constant(ops::linear(x->value.reshape({B, config_.hidden_size}), weight(head_name())->value));
             })
      ->value.to(DType::F32);
}

DecodeState stack_rows(const std::vector<DecodeState>& parts) {
  PRIMER_CHECK(!parts.empty(), "stack_rows: no decode state");
  ag::NoGrad no_grad;
  DecodeState out;
  out.layers.resize(parts.front().layers.size());
  for (const DecodeState& p : parts) {
    PRIMER_CHECK(p.layers.size() == out.layers.size(), "stack_rows: states of {} and {} layers", out.layers.size(),
                 p.layers.size());
    out.tokens.insert(out.tokens.end(), p.tokens.begin(), p.tokens.end());
  }
  for (size_t i = 0; i < out.layers.size(); ++i) {
    MixerState& layer = out.layers[i];
    const MixerState& first = parts.front().layers[i];
    // Recurrent entries are [B, ...]: rows join along dim 0; attention keeps one cache per row already.
    auto join = [&](std::vector<ag::Var> MixerState::*entries) {
      for (size_t e = 0; e < (first.*entries).size(); ++e) {
        std::vector<ag::Var> rows;
        for (const DecodeState& p : parts) rows.push_back((p.layers[i].*entries).at(e));
        (layer.*entries).push_back(ag::concat(rows, 0));
      }
    };
    join(&MixerState::conv);
    join(&MixerState::recurrent);
    for (const DecodeState& p : parts) layer.kv.insert(layer.kv.end(), p.layers[i].kv.begin(), p.layers[i].kv.end());
  }
  return out;
}

DecoderLM::TeacherTargets DecoderLM::teacher_targets(const Tensor& ids, const DistillOptions& opt,
                                                     const Tensor& positions) {
  PRIMER_CHECK(config_.fused, "teacher_targets: the model is not a fused teacher-student model (pattern '{}')",
               format_hybrid_pattern(config_.layer_types));
  PRIMER_CHECK(opt.pre_lm_head || opt.layerwise,
               "distillation has nothing to match: set hybrid_distill_pre_lm_head or a layerwise target");
  ag::NoGrad no_grad;
  std::vector<ag::Var> outs;
  const ag::Var h = stream(ids, context(ids, positions), true, opt.layerwise ? &outs : nullptr);
  TeacherTargets t;
  for (const ag::Var& o : outs) t.layers.push_back(o->value);
  t.final_hidden = final_norm(h)->value;
  return t;
}

ag::Var DecoderLM::distill_loss(const Tensor& ids, const TeacherTargets& targets, const DistillOptions& opt,
                                const Tensor& positions) {
  std::vector<ag::Var> student_layers;
  const ag::Var h = stream(ids, context(ids, positions), false, opt.layerwise ? &student_layers : nullptr);
  ag::Var loss;
  auto add = [&loss](const ag::Var& term) { loss = loss ? ag::add(loss, term) : term; };
  if (opt.layerwise) {
    PRIMER_CHECK(targets.layers.size() == student_layers.size(), "distill_loss: {} layer targets for {} layers",
                 targets.layers.size(), student_layers.size());
    // The reference sums the per-layer errors and divides by the layer count.
    ag::Var sum;
    for (size_t i = 0; i < student_layers.size(); ++i) {
      const ag::Var term = ag::mse_loss(student_layers[i], targets.layers[i]);
      sum = sum ? ag::add(sum, term) : term;
    }
    add(ag::scale(sum, 1.0 / double(student_layers.size())));
  }
  if (opt.pre_lm_head) add(ag::mse_loss(final_norm(h), targets.final_hidden));
  return loss;
}

ag::Var DecoderLM::loss(const Tensor& ids, const Tensor& targets, double grad_scale, const Tensor& positions) {
  ag::Var h = ag::reshape(hidden_states(ids, positions), {-1, config_.hidden_size});
  return in_head_unit(h, [&](const ag::Var& x) {
    return ag::fused_linear_cross_entropy(x, weight(head_name()), targets.reshape({-1}), -100, grad_scale);
  });
}

Tensor DecoderLM::logits(const Tensor& ids, const Tensor& positions) {
  ag::NoGrad no_grad;
  const ag::Var h = hidden_states(ids, positions);
  return in_head_unit(
             h,
             [&](const ag::Var& x) {
               return ag::constant(ops::linear(x->value.to(DType::F32), weight(head_name())->value.to(DType::F32)));
             })
      ->value;
}

double DecoderLM::flops_per_token(int64_t seq_len) const {
  const ModelConfig& c = config_;
  const double d = double(c.hidden_size), f = double(c.intermediate_size);
  double forward = 2.0 * d * double(c.vocab_size) + double(c.num_hidden_layers) * 2.0 * 3.0 * d * f;
  for (const auto& m : mixers_) forward += m->flops_per_token(seq_len);
  return 3.0 * forward;  // backward costs twice the forward
}

}  // namespace primer::layers
