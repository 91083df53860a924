#include "tools/synthetic/a5_task.h"

#include <algorithm>

#include "core/check.h"
#include "core/rng.h"

namespace primer::synthetic {
namespace {

bool is_even(const Permutation5& p) {
  int inversions = 0;
  for (int i = 0; i < 5; ++i)
    for (int j = i + 1; j < 5; ++j) inversions += p[size_t(i)] > p[size_t(j)];
  return inversions % 2 == 0;
}

// table[a * 60 + b] = a ∘ b.
std::vector<int32_t> composition_table() {
  const std::vector<Permutation5>& elements = a5_elements();
  std::vector<int32_t> table(size_t(kA5Order * kA5Order));
  for (int64_t a = 0; a < kA5Order; ++a)
    for (int64_t b = 0; b < kA5Order; ++b) {
      Permutation5 ab;
      for (size_t x = 0; x < 5; ++x) ab[x] = elements[size_t(a)][size_t(elements[size_t(b)][x])];
      table[size_t(a * kA5Order + b)] =
          int32_t(std::lower_bound(elements.begin(), elements.end(), ab) - elements.begin());
    }
  return table;
}

}  // namespace

const std::vector<Permutation5>& a5_elements() {
  static const std::vector<Permutation5> elements = [] {
    std::vector<Permutation5> out;
    Permutation5 p = {0, 1, 2, 3, 4};
    do {
      if (is_even(p)) out.push_back(p);
    } while (std::next_permutation(p.begin(), p.end()));
    return out;
  }();
  return elements;
}

int32_t a5_compose(int32_t a, int32_t b) {
  static const std::vector<int32_t> table = composition_table();
  PRIMER_CHECK(a >= 0 && a < kA5Order && b >= 0 && b < kA5Order, "a5_compose({}, {}): elements are 0..59", a, b);
  return table[size_t(a * kA5Order + b)];
}

LabelledSet make_a5_set(int64_t count, int64_t seq, uint64_t seed) {
  PRIMER_CHECK(count > 0 && seq > 0, "make_a5_set: {} sequences of {} tokens: expected positive sizes", count, seq);
  LabelledSet set{count, seq, std::vector<int32_t>(size_t(count * seq)), std::vector<int32_t>(size_t(count * seq))};
  const uint64_t key = key_for(seed, "a5/elements");
  for (int64_t i = 0; i < count * seq; ++i) {
    const int32_t g = int32_t(uniform_below(key, uint64_t(i), kA5Order));
    set.ids[size_t(i)] = g;
    set.labels[size_t(i)] = i % seq == 0 ? g : a5_compose(g, set.labels[size_t(i - 1)]);
  }
  return set;
}

SyntheticData make_a5_data(int64_t seq, int64_t train_size, int64_t val_size, const std::vector<int64_t>& factors,
                           uint64_t seed) {
  SyntheticData data{kA5Order, make_a5_set(train_size, seq, seed), make_a5_set(val_size, seq, seed + 1), {}};
  for (const int64_t f : factors) {
    PRIMER_CHECK(f > 0, "--factors {}: expected positive integers", f);
    data.evaluation.push_back(make_a5_set(val_size, seq * f, seed + 1000 + uint64_t(f)));
  }
  return data;
}

}  // namespace primer::synthetic
