#include "tools/synthetic/token_accuracy.h"

#include <algorithm>

#include "core/autograd/variable.h"
#include "core/check.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"

namespace primer::synthetic {

double token_accuracy(layers::DecoderLM& model, ParameterRegistry& params, const LabelledSet& set, int64_t batch,
                      Device device) {
  PRIMER_CHECK(batch >= 1, "token_accuracy: batch {}: expected at least 1", batch);
  ag::NoGrad no_grad;
  const int64_t T = set.seq, D = model.config().hidden_size, V = model.config().vocab_size;
  const Tensor& head = params.get(model.head_name()).var->value;
  int64_t correct = 0, total = 0;
  for (int64_t first = 0; first < set.count; first += batch) {
    const int64_t B = std::min(batch, set.count - first);
    const auto begin = set.ids.begin() + first * T;
    const std::vector<int32_t> ids(begin, begin + B * T);
    // The labelled positions as rows of the flattened [B * T, D] hidden states.
    std::vector<int32_t> rows, labels;
    for (int64_t p = 0; p < B * T; ++p) {
      const int32_t label = set.labels[size_t(first * T + p)];
      if (label == kIgnoreLabel) continue;
      rows.push_back(int32_t(p));
      labels.push_back(label);
    }
    if (rows.empty()) continue;
    const int64_t N = int64_t(rows.size());
    const Tensor hidden = model.hidden_states(Tensor::from_vector(ids, {B, T}, DType::I32, device))->value;
    const Tensor picked =
        ops::embedding(hidden.reshape({B * T, D}), Tensor::from_vector(rows, {N}, DType::I32, device));
    const Tensor logits = Tensor::empty({N, V}, DType::F32, device);
    ops::gemm(picked, false, head, true, logits);
    const std::vector<float> host = logits.to_vector<float>();
    for (int64_t n = 0; n < N; ++n) {
      const float* row = host.data() + n * V;
      correct += *std::max_element(row, row + V) <= row[labels[size_t(n)]];
    }
    total += N;
  }
  PRIMER_CHECK(total > 0, "token_accuracy: the set has no labelled position");
  return double(correct) / double(total);
}

}  // namespace primer::synthetic
