// In-context recall as MAD (Poli et al., "Mechanistic Design and Scaling of Hybrid Architectures", 2024; the mad-lab
// repository's in-context recall with multi_query) sets it up, at the length and vocabulary of the Kalman linear
// attention paper's long-context MQAR ("CR (hard)": T = 2048, vocabulary 256, 12,800 training and 1,280 evaluation
// sequences). A sequence is seq/2 key-value pairs: keys drawn uniformly from the lower half of the vocabulary with
// replacement, each key's value drawn once per sequence from the upper half (a new mapping in every sequence), so
// a key repeats with the same value. Training sets label every position with the next token (next-token
// prediction, as MAD trains); evaluation sets label only a key's position whose key appeared before in the
// sequence, with its value (the recall queries). No noise tokens.
#pragma once
#include <cstdint>

#include "tools/synthetic/labelled_set.h"

namespace primer::synthetic {

struct RecallSpec {
  int64_t vocab = 256;  // keys in [0, vocab/2), values in [vocab/2, vocab)
  int64_t seq = 2048;   // tokens per sequence: seq/2 pairs
};

// Errors name the offending field as synthetic_recall's flag.
void validate(const RecallSpec& spec);

// `count` sequences from `seed`; next_token_labels: every position but the last labelled with the next token (a
// training set); otherwise only the recall queries (an evaluation set).
LabelledSet make_recall_set(const RecallSpec& spec, int64_t count, uint64_t seed, bool next_token_labels);

// A run's sets: training (seed), validation (seed + 1) and the one evaluation set at the training length (seed + 2).
SyntheticData make_recall_data(const RecallSpec& spec, int64_t train_size, int64_t val_size, uint64_t seed);

}  // namespace primer::synthetic
