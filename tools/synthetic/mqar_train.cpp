#include "tools/synthetic/mqar_train.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/autograd/variable.h"
#include "core/check.h"
#include "core/rng.h"
#include "layers/decoder_lm.h"
#include "optim/adamw.h"
#include "tools/synthetic/mqar_accuracy.h"

namespace primer::synthetic {
namespace {

// The order in which epoch `epoch` visits the n training sequences (Fisher-Yates from the counter-based stream).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const uint64_t key = key_for(seed, "mqar/epoch");
  for (int64_t j = n - 1; j > 0; --j) {
    const int64_t k = std::min<int64_t>(int64_t(uniform01(key, uint64_t(epoch * n + j)) * double(j + 1)), j);
    std::swap(order[size_t(j)], order[size_t(k)]);
  }
  return order;
}

}  // namespace

void validate(const MqarRunOptions& o) {
  validate(o.task);
  const std::pair<const char*, int64_t> positive[] = {
      {"--layers", o.layers},         {"--width", o.width},      {"--heads", o.heads},
      {"--head-dim", o.head_dim},     {"--ffn", o.ffn},          {"--train-size", o.train_size},
      {"--val-size", o.val_size},     {"--batch", o.batch},      {"--max-steps", o.max_steps},
      {"--eval-every", o.eval_every}, {"--patience", o.patience}};
  for (const auto& [flag, value] : positive) PRIMER_CHECK(value > 0, "{} {}: expected a positive integer", flag, value);
  PRIMER_CHECK(o.head_dim % 2 == 0, "--head-dim {}: expected an even number", o.head_dim);
  PRIMER_CHECK(!o.factors.empty(), "--factors: expected at least one length factor");
  for (const int64_t f : o.factors) PRIMER_CHECK(f > 0, "--factors {}: expected positive integers", f);
  PRIMER_CHECK(std::isfinite(o.lr) && o.lr > 0, "--lr {}: expected a positive number", o.lr);
}

ModelConfig mqar_model_config(MixerKind mixer, const MqarRunOptions& o) {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = o.task.vocab;
  c.hidden_size = o.width;
  c.intermediate_size = o.ffn;
  c.num_hidden_layers = o.layers;
  c.num_attention_heads = o.heads;
  c.num_key_value_heads = o.heads;
  c.head_dim = o.head_dim;
  c.tie_word_embeddings = o.tie_embeddings;
  c.max_position_embeddings = o.task.seq * *std::max_element(o.factors.begin(), o.factors.end());
  c.layer_types.assign(size_t(o.layers), mixer);
  c.validate("synthetic_mqar");
  return c;
}

MqarData make_mqar_data(const MqarRunOptions& o) {
  validate(o);
  MqarData data{make_mqar_set(o.task, o.train_size, o.seed, o.seed),
                make_mqar_set(o.task, o.val_size, o.seed + 1, o.seed + 1),
                {}};
  for (const int64_t f : o.factors) {
    MqarSpec longer = o.task;
    longer.seq = o.task.seq * f;
    data.extrapolation.push_back(make_mqar_set(longer, o.val_size, o.seed + 1000, o.seed + 1000 + uint64_t(f)));
  }
  return data;
}

MqarResult train_mqar(MixerKind mixer, const MqarRunOptions& o, const MqarData& data, Device device) {
  validate(o);
  ParameterRegistry params;
  layers::DecoderLM model(mqar_model_config(mixer, o), params);
  params.materialize(device, device.is_cuda() ? DType::BF16 : DType::F32, o.seed);
  // PyTorch's AdamW moments (β₂ 0.999), the paper's decay and clipping.
  optim::AdamW adamw(
      params,
      {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = o.weight_decay, .max_grad_norm = o.max_grad_norm});
  MqarResult result{mixer_token(mixer), params.count()};

  const int64_t B = o.batch, T = data.train.seq, N = data.train.count;
  std::vector<int32_t> ids(size_t(B * T)), labels(size_t(B * T));
  std::vector<int64_t> order;
  std::vector<Tensor> best;  // the best validation step's master weights
  int64_t stale = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < o.max_steps && stale < o.patience; ++step) {
    for (int64_t r = 0; r < B; ++r) {
      const int64_t index = step * B + r;
      if (index % N == 0 || order.empty()) order = epoch_order(N, o.seed, index / N);
      const int64_t row = order[size_t(index % N)];
      std::copy_n(data.train.ids.begin() + row * T, T, ids.begin() + r * T);
      std::copy_n(data.train.labels.begin() + row * T, T, labels.begin() + r * T);
    }
    const int64_t labelled = std::count_if(labels.begin(), labels.end(), [](int32_t l) { return l != kIgnoreLabel; });
    params.zero_grads();
    const ag::Var loss = model.loss(Tensor::from_vector(ids, {B, T}, DType::I32, device),
                                    Tensor::from_vector(labels, {B, T}, DType::I32, device), 1.0 / double(labelled));
    ag::backward(loss);
    adamw.step(o.lr);
    result.steps = step + 1;
    if ((step + 1) % o.eval_every != 0 && step + 1 != o.max_steps) continue;
    const double val = mqar_accuracy(model, params, data.val, B, device);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("{} step {:5d} | loss {:.4f} | val acc {:6.2f}% | {:.1f} s\n", result.mixer, step + 1,
               loss->value.item() / double(labelled), 100 * val, elapsed);
    if (best.empty() || val > result.best_val) {
      result.best_val = val;
      result.best_step = step + 1;
      best.clear();
      for (const Parameter* p : params.all()) best.push_back(p->master.clone());
      stale = 0;
    } else {
      ++stale;
    }
  }
  result.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const std::vector<Parameter*> all = params.all();
  for (size_t i = 0; i < all.size(); ++i) all[i]->master.copy_from(best[i]);
  params.sync_compute_copies();
  for (const MqarSet& set : data.extrapolation) result.accuracy.push_back(mqar_accuracy(model, params, set, B, device));
  return result;
}

}  // namespace primer::synthetic
