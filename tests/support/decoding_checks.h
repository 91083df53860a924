// Greedy decoding from carried state (layers::DecodeState) against the full forward recomputed at every step, shared
// by the CPU and CUDA decoding tests (tests/cpu/test_decoding.cpp, tests/cuda/test_decoding_cuda.cpp).
#pragma once
#include <functional>
#include <vector>

#include "layers/decoder_lm.h"

namespace primer::test {

// Each row's argmax of logits [B, V] (ties: the first).
std::vector<int32_t> argmax_rows(const Tensor& logits);

// Prefills prompt rows (i32 [B, prompt] on `device`) in one decode call, then decodes `steps` tokens greedily one
// step at a time, each row continuing with the argmax of its decoded logits. Before each token is chosen,
// check(decoded, full, t) receives the decoded logits [B, V] and the last position's logits [B, V] of a full forward
// recomputed over all t tokens so far. Returns the decoded tokens, row-major [B, steps].
std::vector<int32_t> decode_against_full_forward(
    layers::DecoderLM& model, const Tensor& prompt, int64_t steps,
    const std::function<void(const Tensor&, const Tensor&, int64_t)>& check);

}  // namespace primer::test
