// Checks every sequence mixer's tests share: the whole layer against finite differences (input, carried state,
// every parameter; gradients arriving at the output and at the final state), and decoding token by token against
// the full forward.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/parameters.h"
#include "layers/mixer.h"
#include "layers/model_config.h"
#include "tests/support/test_util.h"

namespace primer::test {

// The tiny Qwen3-shaped config the mixer tests build layers from (hidden 8, head_dim 4): each test sets its
// mixer's flags on top.
ModelConfig tiny_mixer_config(int64_t q_heads, int64_t kv_heads, int64_t layers = 2);

// f64, on the CPU. Parameters are redrawn N(0, 0.5²) first, so constant-initialised ones (norm weights, biases) are
// exercised; s0's entries must have the shapes the mixer carries. Every input and parameter gets a gradient except
// the parameters named in `unused` (registered by a flag's reference layout but not used: they must get none).
void run_mixer_gradcheck(layers::SequenceMixer& mixer, ParameterRegistry& params, const Tensor& x,
                         const layers::MixerState& s0, const layers::MixerContext& ctx, uint64_t seed,
                         const std::vector<std::string>& unused = {});

// Runs x [B, T, D] once from s0 and again one token at a time from s0, each call from the previous one's state:
// outputs and recurrent states agree within rel/abs `tolerance`, conv states exactly.
void expect_decoding_matches_forward(layers::SequenceMixer& mixer, const Tensor& x, const layers::MixerState& s0,
                                     const layers::MixerContext& ctx, double tolerance);

// The two checks every recurrent mixer's flag variants run, each on the mixer `make(params)` returns (by value) with
// f64 CPU parameters drawn from `seed`; `state(B, seed)` draws a carried state for B rows. The whole layer against
// finite differences (B 2, T 5, from state(2, seed + 1)), parameters named in `unused` getting no gradient:
template <class Make, class State> void check_layer_gradients(int64_t hidden, Make make, State state, uint64_t seed,
                                                              const std::vector<std::string>& unused = {}) {
  ParameterRegistry params;
  auto mixer = make(params);
  params.materialize(Device::cpu(), DType::F64, seed);
  const int64_t B = 2, T = 5;
  run_mixer_gradcheck(mixer, params, randn({B, T, hidden}, seed + 2), state(B, seed + 1), {}, seed, unused);
}

// ... and decoding token by token against the full forward (B 2, T 9), from no state and from state(2, seed + 2).
template <class Make, class State>
void check_decoding(int64_t hidden, Make make, State state, uint64_t seed, double tolerance) {
  ParameterRegistry params;
  auto mixer = make(params);
  params.materialize(Device::cpu(), DType::F64, seed);
  const int64_t B = 2, T = 9;
  const Tensor x = randn({B, T, hidden}, seed + 1);
  for (bool from_nothing : {true, false}) {
    SCOPED_TRACE(from_nothing ? "from no state" : "from a state");
    expect_decoding_matches_forward(mixer, x, from_nothing ? layers::MixerState{} : state(B, seed + 2), {}, tolerance);
  }
}

// Every (name, shape) of `expected` is registered under `prefix` with that shape; with `exactly`, nothing else is.
void expect_parameter_shapes(ParameterRegistry& params, const std::string& prefix,
                             const std::vector<std::pair<std::string, Shape>>& expected, bool exactly);

// An SSM's decay parameters under `prefix` (A_log [H], dt_bias): kept in f32 under bf16 and without weight decay;
// materialized (bf16 compute), A = exp(A_log) ∈ (0, 16] and softplus(dt_bias) ∈ [1e-4, 0.1].
void expect_ssm_decay_parameters(ParameterRegistry& params, const std::string& prefix);

// Adaptive GQA starts as plain GQA (zero low-rank output, replication residual): the mixer built from `agqa` (with
// kv_proj_rank; it must register each of `agqa_names`) and from `plain` (the same without) give the same output at
// initialisation, within `tolerance` (f64, CPU, parameters from `seed`).
template <class Mixer>
void expect_adaptive_gqa_starts_as_plain(const ModelConfig& agqa, const ModelConfig& plain, const std::string& prefix,
                                         const std::vector<std::string>& agqa_names, uint64_t seed, double tolerance) {
  ParameterRegistry pa, pp;
  Mixer a(agqa, prefix, pa), p(plain, prefix, pp);
  pa.materialize(Device::cpu(), DType::F64, seed);
  pp.materialize(Device::cpu(), DType::F64, seed);
  for (const std::string& name : agqa_names) EXPECT_TRUE(pa.contains(prefix + "." + name)) << name;
  const Tensor x = randn({2, 5, agqa.hidden_size}, seed + 1);
  ag::NoGrad no_grad;
  expect_close(a.forward(ag::constant(x), {})->value, p.forward(ag::constant(x), {})->value, tolerance, tolerance,
               "AGQA at init");
}

// A hybrid decoder with config `c` (its pattern names the mixer under test) memorises one random batch with AdamW
// on the CPU: after 30 steps the loss must be under `fraction` of the first step's.
void expect_hybrid_decoder_learns(const ModelConfig& c, double fraction, uint64_t seed);

// `c` as the small decoder those checks train: hidden 32, SwiGLU 48, head_dim 8, the layers of `pattern` (empty:
// c's own), validated.
ModelConfig small_hybrid(ModelConfig c, const std::string& pattern = "");

}  // namespace primer::test
