#include "tools/synthetic/mqar_task.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "core/rng.h"

namespace primer::synthetic {
namespace {

// Cumulative weights (o + 1)^-alpha of the query offsets, normalised to end at 1.
std::vector<double> offset_cdf(const MqarSpec& s) {
  std::vector<double> cdf(size_t(s.seq - 1 - s.query_start));
  double total = 0;
  for (size_t o = 0; o < cdf.size(); ++o) cdf[o] = total += std::pow(double(o + 1), -s.power_alpha);
  for (double& c : cdf) c /= total;
  return cdf;
}

}  // namespace

void validate(const MqarSpec& s) {
  PRIMER_CHECK(s.vocab >= 4 && s.vocab % 2 == 0, "--vocab {}: expected an even number of at least 4", s.vocab);
  PRIMER_CHECK(s.pairs >= 1, "--pairs {}: expected at least 1", s.pairs);
  PRIMER_CHECK(2 * s.pairs <= s.query_start,
               "--query-start {}: expected at least 2 x --pairs = {} (the pairs come first)", s.query_start,
               2 * s.pairs);
  PRIMER_CHECK(s.query_start <= s.seq - 2, "--seq {}: expected at least --query-start + 2 = {}", s.seq,
               s.query_start + 2);
  PRIMER_CHECK(std::isfinite(s.power_alpha) && s.power_alpha >= 0, "power_alpha {}: expected a finite number >= 0",
               s.power_alpha);
}

LabelledSet make_mqar_set(const MqarSpec& s, int64_t count, uint64_t pair_seed, uint64_t layout_seed) {
  validate(s);
  PRIMER_CHECK(count >= 0, "mqar: count {}: expected 0 or more sequences", count);
  const uint64_t pair_key = key_for(pair_seed, "mqar/pairs"), noise_key = key_for(layout_seed, "mqar/noise");
  const uint64_t order_key = key_for(layout_seed, "mqar/order"), where_key = key_for(layout_seed, "mqar/where");
  const int64_t half = s.vocab / 2, P = s.pairs, T = s.seq;
  const std::vector<double> cdf = offset_cdf(s);
  LabelledSet set = LabelledSet::blank(count, T);
  std::vector<int64_t> order(static_cast<size_t>(P));
  for (int64_t i = 0; i < count; ++i) {
    int32_t* ids = set.ids.data() + i * T;
    int32_t* labels = set.labels.data() + i * T;
    for (int64_t t = 2 * P; t < T; ++t) ids[t] = int32_t(uniform_below(noise_key, uint64_t(i * T + t), s.vocab));
    for (int64_t j = 0; j < P; ++j) {
      ids[2 * j] = int32_t(uniform_below(pair_key, uint64_t(i * 2 * P + 2 * j), half));
      ids[2 * j + 1] = int32_t(half + uniform_below(pair_key, uint64_t(i * 2 * P + 2 * j + 1), half));
    }
    // Fisher-Yates shuffle of the query order, then one power-law position per query.
    std::iota(order.begin(), order.end(), 0);
    for (int64_t j = P - 1; j > 0; --j)
      std::swap(order[size_t(j)], order[size_t(uniform_below(order_key, uint64_t(i * P + j), j + 1))]);
    for (int64_t q = 0; q < P; ++q) {
      const double u = uniform01(where_key, uint64_t(i * P + q));
      const int64_t offset =
          std::min<int64_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin(), int64_t(cdf.size()) - 1);
      const int64_t t = s.query_start + offset, pair = order[size_t(q)];
      ids[t] = ids[2 * pair];
      labels[t] = ids[2 * pair + 1];
    }
  }
  return set;
}

SyntheticData make_mqar_data(const MqarSpec& spec, int64_t train_size, int64_t val_size,
                             const std::vector<int64_t>& factors, uint64_t seed) {
  PRIMER_CHECK(train_size > 0 && val_size > 0, "--train-size {} / --val-size {}: expected positive integers",
               train_size, val_size);
  SyntheticData data{
      spec.vocab, make_mqar_set(spec, train_size, seed, seed), make_mqar_set(spec, val_size, seed + 1, seed + 1), {}};
  for (const int64_t f : factors) {
    PRIMER_CHECK(f > 0, "--factors {}: expected positive integers", f);
    MqarSpec longer = spec;
    longer.seq = spec.seq * f;
    data.evaluation.push_back(make_mqar_set(longer, val_size, seed + 1000, seed + 1000 + uint64_t(f)));
  }
  return data;
}

}  // namespace primer::synthetic
