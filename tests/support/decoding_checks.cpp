#include "tests/support/decoding_checks.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace primer::test {

std::vector<int32_t> argmax_rows(const Tensor& logits) {
  const std::vector<float> v = logits.to(Device::cpu()).contiguous().to_vector<float>();
  const int64_t V = logits.size(-1);
  std::vector<int32_t> out;
  for (int64_t r = 0; r < int64_t(v.size()) / V; ++r)
    out.push_back(int32_t(std::max_element(v.begin() + r * V, v.begin() + (r + 1) * V) - (v.begin() + r * V)));
  return out;
}

std::vector<int32_t> decode_against_full_forward(
    layers::DecoderLM& model, const Tensor& prompt, int64_t steps,
    const std::function<void(const Tensor&, const Tensor&, int64_t)>& check) {
  const Device device = prompt.device();
  const int64_t B = prompt.size(0), V = model.config().vocab_size;
  std::vector<int32_t> rows = prompt.to(Device::cpu()).contiguous().to_vector<int32_t>();
  std::vector<int32_t> decoded(size_t(B * steps));
  layers::DecodeState state;
  Tensor logits = model.decode(prompt, state);
  for (int64_t t = prompt.size(1), s = 0; s < steps; ++t, ++s) {
    // The full forward over everything so far, recomputed from scratch.
    const Tensor full = model.logits(Tensor::from_vector(rows, {B, t}, DType::I32, device));
    check(logits, full.slice(1, t - 1, t).contiguous().reshape({B, V}), t);
    const std::vector<int32_t> next = argmax_rows(logits);
    std::vector<int32_t> longer;
    for (int64_t b = 0; b < B; ++b) {
      longer.insert(longer.end(), rows.begin() + b * t, rows.begin() + (b + 1) * t);
      longer.push_back(next[size_t(b)]);
      decoded[size_t(b * steps + s)] = next[size_t(b)];
    }
    rows = std::move(longer);
    logits = model.decode(Tensor::from_vector(next, {B, 1}, DType::I32, device), state);
    EXPECT_EQ(state.tokens, std::vector<int64_t>(size_t(B), t + 1));
  }
  return decoded;
}

}  // namespace primer::test
