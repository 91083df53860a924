// A synthetic task's data: sequences of token ids with a label per position (kIgnoreLabel where nothing is asked),
// and the sets one run uses.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace primer::synthetic {

inline constexpr int32_t kIgnoreLabel = -100;

// `count` sequences, row-major [count, seq]: token ids and the label of each position.
struct LabelledSet {
  int64_t count = 0, seq = 0;
  std::vector<int32_t> ids, labels;
  // `count` sequences of `seq` tokens, ids 0 and no position labelled: for a generator to fill.
  static LabelledSet blank(int64_t count, int64_t seq) {
    return {count, seq, std::vector<int32_t>(size_t(count * seq)),
            std::vector<int32_t>(size_t(count * seq), kIgnoreLabel)};
  }
  int64_t labelled() const {  // positions with a label
    return std::count_if(labels.begin(), labels.end(), [](int32_t l) { return l != kIgnoreLabel; });
  }
};

// Every set a run uses, generated once and shared by the models compared: training and validation at the training
// length, and evaluation sets at other lengths (the best weights are measured on each).
struct SyntheticData {
  int64_t vocab = 0;
  LabelledSet train, val;
  std::vector<LabelledSet> evaluation;
};

}  // namespace primer::synthetic
