// Multi-query associative recall (MQAR, Zoology: Arora et al. 2023) as the Kaczmarz linear attention paper sets it
// up for length extrapolation: `pairs` key-value pairs at the start of the sequence (key, value, key, value, ...),
// keys drawn from the lower half of the vocabulary and values from the upper half, both with replacement; the rest
// is uniform noise over the whole vocabulary; each pair is queried once, in shuffled order, by its key overwriting
// the noise at a position drawn from a power law over [query_start, seq - 2] (queries may collide: a later query
// overwrites an earlier one). The value is the label of the query's own position (the model predicts it as the
// next token after the key); every other position is ignored (-100). No separator token.
#pragma once
#include <cstdint>
#include <vector>

#include "tools/synthetic/labelled_set.h"

namespace primer::synthetic {

struct MqarSpec {
  int64_t vocab = 8192;      // keys in [0, vocab/2), values in [vocab/2, vocab)
  int64_t pairs = 32;        // key-value pairs per sequence, each queried once
  int64_t seq = 256;         // tokens per sequence
  int64_t query_start = 64;  // the first position a query may take
  double power_alpha = 0.1;  // query offset o ∈ [0, seq - 1 - query_start) drawn with weight (o + 1)^-alpha
};

// Errors name the offending field as synthetic_mqar's flag (the pairs must fit before the first query position,
// the query range must not be empty).
void validate(const MqarSpec& spec);

// Sequence i's key-value pairs depend only on (pair_seed, i), its noise and query positions only on
// (layout_seed, i): sets of several lengths made with one pair_seed hold the same pairs, sequence by sequence,
// and differ in the noise (the extrapolation sets).
LabelledSet make_mqar_set(const MqarSpec& spec, int64_t count, uint64_t pair_seed, uint64_t layout_seed);

// The sets of one run: `train_size` training and `val_size` validation sequences at spec.seq (pair and layout seeds
// `seed` and seed + 1), and for each factor f an evaluation set of `val_size` sequences at spec.seq · f that keeps
// the pairs of one pair seed (seed + 1000) and draws its noise and queries anew (seed + 1000 + f).
SyntheticData make_mqar_data(const MqarSpec& spec, int64_t train_size, int64_t val_size,
                             const std::vector<int64_t>& factors, uint64_t seed);

}  // namespace primer::synthetic
