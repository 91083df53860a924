#include "tools/synthetic/synthetic_train.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <sstream>

#include "core/autograd/variable.h"
#include "core/check.h"
#include "core/rng.h"
#include "layers/decoder_lm.h"
#include "optim/adamw.h"
#include "tools/synthetic/token_accuracy.h"

namespace primer::synthetic {
namespace {

// The order in which epoch `epoch` visits the n training sequences (Fisher-Yates from the counter-based stream).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const uint64_t key = key_for(seed, "synthetic/epoch");
  for (int64_t j = n - 1; j > 0; --j) {
    const int64_t k = uniform_below(key, uint64_t(epoch * n + j), j + 1);
    std::swap(order[size_t(j)], order[size_t(k)]);
  }
  return order;
}

}  // namespace

void validate(const SyntheticModel& m, const SyntheticTraining& t) {
  const std::pair<const char*, int64_t> positive[] = {
      {"--layers", m.layers},    {"--width", m.width}, {"--heads", m.heads},         {"--head-dim", m.head_dim},
      {"--ffn", m.ffn},          {"--batch", t.batch}, {"--max-steps", t.max_steps}, {"--eval-every", t.eval_every},
      {"--patience", t.patience}};
  for (const auto& [flag, value] : positive) PRIMER_CHECK(value > 0, "{} {}: expected a positive integer", flag, value);
  PRIMER_CHECK(m.head_dim % 2 == 0, "--head-dim {}: expected an even number", m.head_dim);
  PRIMER_CHECK(std::isfinite(t.lr) && t.lr > 0, "--lr {}: expected a positive number", t.lr);
  PRIMER_CHECK(std::isfinite(t.weight_decay) && t.weight_decay >= 0, "--weight-decay {}: expected a number >= 0",
               t.weight_decay);
  PRIMER_CHECK(std::isfinite(t.max_grad_norm) && t.max_grad_norm > 0, "--clip {}: expected a positive number",
               t.max_grad_norm);
}

std::string SyntheticMixer::name() const { return kda_gates ? "KDA" : mixer_token(kind); }

ModelConfig synthetic_model_config(const SyntheticMixer& mixer, const SyntheticModel& m, int64_t vocab,
                                   int64_t max_seq) {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = vocab;
  c.hidden_size = m.width;
  c.intermediate_size = m.ffn;
  c.num_hidden_layers = m.layers;
  c.num_attention_heads = m.heads;
  c.num_key_value_heads = m.heads;
  c.head_dim = m.head_dim;
  c.tie_word_embeddings = m.tie_embeddings;
  c.max_position_embeddings = max_seq;
  c.layer_types.assign(size_t(m.layers), mixer.kind);
  c.gdn2.kda_gates = mixer.kda_gates;
  c.validate("synthetic task model");
  return c;
}

SyntheticResult train_synthetic(const SyntheticMixer& mixer, const SyntheticModel& m, const SyntheticTraining& o,
                                const SyntheticData& data, Device device) {
  validate(m, o);
  PRIMER_CHECK(data.train.count > 0 && data.val.count > 0, "train_synthetic: empty training or validation set");
  int64_t max_seq = data.train.seq;
  for (const LabelledSet& set : data.evaluation) max_seq = std::max(max_seq, set.seq);
  ParameterRegistry params;
  layers::DecoderLM model(synthetic_model_config(mixer, m, data.vocab, max_seq), params);
  params.materialize(device, device.is_cuda() ? DType::BF16 : DType::F32, o.seed);
  // PyTorch's AdamW moments (β₂ 0.999), the paper's decay and clipping.
  optim::AdamW adamw(
      params,
      {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = o.weight_decay, .max_grad_norm = o.max_grad_norm});
  SyntheticResult result{mixer.name(), m.layers, params.count()};

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
    const double val = token_accuracy(model, params, data.val, B, device);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("{} x {} step {:5d} | loss {:.4f} | val acc {:6.2f}% | {:.1f} s\n", result.mixer, m.layers, step + 1,
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
  for (const LabelledSet& set : data.evaluation)
    result.accuracy.push_back(token_accuracy(model, params, set, B, device));
  return result;
}

std::vector<SyntheticMixer> parse_mixer_list(const std::string& list) {
  std::vector<SyntheticMixer> mixers;
  std::stringstream in(list);
  for (std::string token; std::getline(in, token, ',');)
    mixers.push_back(token == "KDA" ? SyntheticMixer{MixerKind::GatedDeltaNet2, true}
                                    : SyntheticMixer{parse_mixer_token(token, "--mixers " + list)});
  PRIMER_CHECK(!mixers.empty(), "--mixers: expected a comma-separated list of mixers, e.g. GDN,KZLA,M2,KDA");
  return mixers;
}

void print_results(int64_t seq, const std::vector<int64_t>& factors, const std::vector<SyntheticResult>& results,
                   bool by_depth) {
  std::string header =
      by_depth ? "| mixer | blocks | params | steps | best val step |" : "| mixer | params | steps | best val step |";
  std::string rule = by_depth ? "|---|---:|---:|---:|---:|" : "|---|---:|---:|---:|";
  for (const int64_t f : factors) {
    header += fmt::format(" acc @ {} |", seq * f);
    rule += "---:|";
  }
  if (by_depth) {
    header += fmt::format(" solved at {} |", seq);
    rule += "---|";
  }
  fmt::print("\n{} train time |\n{}---:|\n", header, rule);
  for (const SyntheticResult& r : results) {
    std::string row = by_depth ? fmt::format("| {} | {} |", r.mixer, r.layers) : fmt::format("| {} |", r.mixer);
    row += fmt::format(" {:.2f}M | {} | {} |", double(r.params) / 1e6, r.steps, r.best_step);
    for (const double a : r.accuracy) row += fmt::format(" {:.2f} |", 100 * a);
    if (by_depth) row += r.accuracy.front() >= 0.9 ? " yes |" : " no |";
    fmt::print("{} {:.0f} s |\n", row, r.train_seconds);
  }
}

}  // namespace primer::synthetic
