// Priming Stage 0 (`primer prime-init stage0.yaml`): a Hugging Face Transformer → a fused hybrid checkpoint whose
// converted layers hold a student mixer initialised from the layer's attention next to that attention (the
// teacher). See docs/stage0.md.
#pragma once
#include <string>
#include <vector>

#include "core/parameters.h"
#include "layers/model_config.h"

namespace primer::recipes {

// Fills the student mixer of every converted layer of the fused model `c` from the teacher attention stored under
// model.layers.<i>.self_attn (CPU f32 masters): Q/K/V/O, the gate 0.5·(W_Oᵀ + expanded W_V) (head-wise, or
// row-wise as the reference code does), QK-norm where the mixer has one. Returns one log line per layer saying
// what was copied and what keeps its initialisation.
std::vector<std::string> transfer_attention_weights(const ModelConfig& c, ParameterRegistry& params, bool rowwise_gate);

// gate [Hq·D, hidden] = 0.5·(W_Oᵀ + W_V expanded to the query heads), W_O [hidden, Hq·D], W_V [Hkv·D, hidden]
// (CPU f32). Head-wise: row (h, d) takes W_V row (h / groups)·D + d; row-wise: row i takes W_V row i / groups.
void init_gate(const Tensor& gate, const Tensor& w_o, const Tensor& w_v, int64_t head_dim, int64_t groups,
               bool rowwise);

// The CLI entry: loads and validates the recipe, builds, transfers and writes. Returns a process exit code.
int run_prime_init(const std::string& recipe, const std::vector<std::string>& overrides);

}  // namespace primer::recipes
