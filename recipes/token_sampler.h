// Picking the next token from a model's logits: greedy (temperature 0), or sampling at a temperature from the top-k
// tokens and the smallest set whose probability reaches top-p (applied in that order, as Hugging Face does). The
// draws come from (seed, draw index), so a seed reproduces a generation.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace primer::recipes {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy
  int64_t top_k = 0;       // 0: every token
  double top_p = 1;        // in (0, 1]
  uint64_t seed = 0;
};

class TokenSampler {
 public:
  explicit TokenSampler(const SamplingOptions& options);  // errors name the option out of range
  // One token per row of f32 logits [B, V] (any device). Greedy takes the first of equal maxima.
  std::vector<int32_t> next(const Tensor& logits);

 private:
  int32_t sample_row(const float* logits, int64_t vocab);

  SamplingOptions options_;
  uint64_t key_ = 0, draws_ = 0;
};

}  // namespace primer::recipes
