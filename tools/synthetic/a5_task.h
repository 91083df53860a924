// The word problem of the alternating group A5, the state-tracking task of Merrill, Petty and Sabharwal, "The Illusion
// of State in State-Space Models" (2024), on which Kalman linear attention's paper reports solving with 1–2 blocks:
// each token is one of A5's 60 elements (the even permutations of 5 points), and the label of position t is the
// product of the elements so far, p_t = g_t ∘ p_{t−1} (p_1 = g_1): tracking it needs a state that composes
// non-commuting permutations, which a model whose state updates commute cannot do at constant depth.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "tools/synthetic/labelled_set.h"

namespace primer::synthetic {

inline constexpr int64_t kA5Order = 60;
using Permutation5 = std::array<int8_t, 5>;

// The 60 elements in lexicographic order of their permutations (element 0 is the identity).
const std::vector<Permutation5>& a5_elements();
// Index of a ∘ b (x ↦ a(b(x))).
int32_t a5_compose(int32_t a, int32_t b);

// `count` sequences of `seq` elements drawn uniformly and independently (counter-based stream of `seed`), each
// position labelled with the running product.
LabelledSet make_a5_set(int64_t count, int64_t seq, uint64_t seed);

// Training and validation sets at `seq` (seeds `seed`, seed + 1) and one evaluation set of `val_size` sequences at
// seq · f for each factor f (seed + 1000 + f).
SyntheticData make_a5_data(int64_t seq, int64_t train_size, int64_t val_size, const std::vector<int64_t>& factors,
                           uint64_t seed);

}  // namespace primer::synthetic
