#include "recipes/token_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "core/rng.h"

namespace primer::recipes {

TokenSampler::TokenSampler(const SamplingOptions& o) : options_(o), key_(key_for(o.seed, "generate.sampling")) {
  PRIMER_CHECK(o.temperature >= 0 && std::isfinite(o.temperature), "--temperature {}: expected 0 (greedy) or more",
               o.temperature);
  PRIMER_CHECK(o.top_k >= 0, "--top-k {}: expected 0 (every token) or more", o.top_k);
  PRIMER_CHECK(o.top_p > 0 && o.top_p <= 1, "--top-p {}: expected a probability in (0, 1]", o.top_p);
}

std::vector<int32_t> TokenSampler::next(const Tensor& logits) {
  PRIMER_CHECK(logits.dim() == 2 && logits.dtype() == DType::F32, "sampling needs f32 logits [B, V], got {}",
               logits.describe());
  const std::vector<float> values = logits.contiguous().to(Device::cpu()).to_vector<float>();
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  std::vector<int32_t> out;
  for (int64_t r = 0; r < rows; ++r) out.push_back(sample_row(values.data() + r * vocab, vocab));
  return out;
}

int32_t TokenSampler::sample_row(const float* logits, int64_t vocab) {
  if (options_.temperature == 0) return int32_t(std::max_element(logits, logits + vocab) - logits);
  // Candidates from the most likely down; top-k keeps the first k.
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const size_t k = options_.top_k > 0 ? size_t(std::min(options_.top_k, vocab)) : order.size();
  std::partial_sort(order.begin(), order.begin() + ptrdiff_t(k), order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  order.resize(k);
  std::vector<double> p(k);
  const double top = double(logits[order.front()]);
  for (size_t i = 0; i < k; ++i) p[i] = std::exp((double(logits[order[i]]) - top) / options_.temperature);
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  // Top-p: the smallest prefix whose probability reaches top_p (at least one token).
  size_t kept = 0;
  for (double mass = 0; kept < k && (kept == 0 || mass < options_.top_p * total);) mass += p[kept++];
  const double kept_mass = std::accumulate(p.begin(), p.begin() + ptrdiff_t(kept), 0.0);
  double u = uniform01(key_, draws_++) * kept_mass;
  for (size_t i = 0; i + 1 < kept; ++i) {
    if (u < p[i]) return order[i];
    u -= p[i];
  }
  return order[kept - 1];
}

}  // namespace primer::recipes
