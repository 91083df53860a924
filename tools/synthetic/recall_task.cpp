#include "tools/synthetic/recall_task.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/rng.h"

namespace primer::synthetic {

void validate(const RecallSpec& s) {
  PRIMER_CHECK(s.vocab >= 4 && s.vocab % 2 == 0, "--vocab {}: expected an even number of at least 4", s.vocab);
  PRIMER_CHECK(s.seq >= 4 && s.seq % 2 == 0, "--seq {}: expected an even number of at least 4 (key-value pairs)",
               s.seq);
}

LabelledSet make_recall_set(const RecallSpec& s, int64_t count, uint64_t seed, bool next_token_labels) {
  validate(s);
  PRIMER_CHECK(count >= 0, "recall: count {}: expected 0 or more sequences", count);
  const uint64_t key_stream = key_for(seed, "recall/keys"), value_stream = key_for(seed, "recall/values");
  const int64_t half = s.vocab / 2, T = s.seq, P = T / 2;
  const auto draw = [half](uint64_t stream, uint64_t index) { return int32_t(uniform_below(stream, index, half)); };
  LabelledSet set = LabelledSet::blank(count, T);
  std::vector<bool> seen(static_cast<size_t>(half));
  for (int64_t i = 0; i < count; ++i) {
    int32_t* ids = set.ids.data() + i * T;
    int32_t* labels = set.labels.data() + i * T;
    std::fill(seen.begin(), seen.end(), false);
    for (int64_t j = 0; j < P; ++j) {
      const int32_t key = draw(key_stream, uint64_t(i * P + j));
      // The sequence's mapping: one value per (sequence, key), whenever the key comes.
      const int32_t value = int32_t(half) + draw(value_stream, uint64_t(i * half + key));
      ids[2 * j] = key;
      ids[2 * j + 1] = value;
      if (!next_token_labels && seen[size_t(key)]) labels[2 * j] = value;
      seen[size_t(key)] = true;
    }
    if (next_token_labels) std::copy(ids + 1, ids + T, labels);
  }
  return set;
}

SyntheticData make_recall_data(const RecallSpec& spec, int64_t train_size, int64_t val_size, uint64_t seed) {
  PRIMER_CHECK(train_size > 0 && val_size > 0, "--train-size {} / --val-size {}: expected positive integers",
               train_size, val_size);
  return {spec.vocab,
          make_recall_set(spec, train_size, seed, true),
          make_recall_set(spec, val_size, seed + 1, false),
          {make_recall_set(spec, val_size, seed + 2, false)}};
}

}  // namespace primer::synthetic
