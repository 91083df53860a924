// Decoding from carried state on the GPU (tests/cpu/test_decoding.cpp is the CPU side): for every mixer with CUDA
// kernels and a hybrid of them, greedy tokens decoded one step at a time after a prefilled prompt follow a full
// forward recomputed at every step; prompts of different lengths decoded together follow each prompt decoded alone;
// and the GPU's decoding follows the CPU's on the same weights.
// GDN2 is left out: its op (gated_delta_rule2) refuses CUDA tensors (CPU only so far).
//
// The model computes in bf16: CUDA attention takes bf16 only, so f32 is not an option. Logits are therefore compared
// within a tolerance, and a greedy token is required to equal the reference's argmax only where the reference's top
// two logits are further apart than twice that tolerance (closer ones may swap under bf16 rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "layers/decoder_lm.h"
#include "layers/hybrid_config.h"
#include "tests/cuda/parity_util.h"
#include "tests/support/decoding_checks.h"

namespace primer {
namespace {

struct Case {
  const char* name;
  const char* pattern;         // "" for a Transformer
  int64_t sliding_window = 0;  // the model's (Mistral-style) window
};

const Case kCases[] = {{"Attention", ""},
                       {"MistralWindow", "", 4},
                       {"SWA", "*-SWA"},
                       {"M2", "*-M2"},
                       {"GDN", "*-GDN"},
                       {"GKA", "*-GKA"},
                       {"KZLA", "*-KZLA"},
                       {"KLA", "*-KLA"},
                       {"GDN2", "*-GDN2"},
                       {"BMF", "*-BMF"},
                       {"Hybrid", "SWA-M2-GDN-*-GKA-KZLA-KLA-BMF"}};

// Head dims of 64: what the CUDA attention and recurrent kernels take.
ModelConfig decoding_config(const Case& c) {
  const std::string pattern = c.pattern;
  ModelConfig config;
  config.model_type = "qwen3";
  config.vocab_size = 256;
  config.hidden_size = 128;
  config.intermediate_size = 256;
  config.num_hidden_layers = pattern.empty() ? 2 : int64_t(std::count(pattern.begin(), pattern.end(), '-') + 1);
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.head_dim = 64;
  config.max_position_embeddings = 256;
  config.qk_norm = true;
  config.sliding_window = c.sliding_window;
  if (!pattern.empty()) config.layer_types = parse_hybrid_pattern(pattern, "test");
  config.swa.window_size = 3;       // smaller than the prompts and the tokens decoded
  config.bmojo.window_size = 4;     // so B'MOJO-F's fading window fills too
  config.gka.ridge_strength = 0.5;  // κ = 3: bf16 rounding of the solve not amplified (test_gka_mixer_cuda.cpp)
  config.validate("test");
  return config;
}

// bf16 activations (2^-9 relative per rounding) through the blocks: the mixers' CUDA layer tests bound one bf16
// layer's output within 2e-2 to 3e-2 (rel L2) of f64; over up to seven blocks and the LM head, and between two bf16
// computations that round differently (a chunked forward against token-by-token steps), 6e-2 of the logits'
// largest magnitude, elementwise and in rel L2.
constexpr double kLogitsTol = 6e-2;

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to(Device::cpu()).to(DType::F64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// Logits [B, V] within kLogitsTol of the reference's, and each row's argmax the reference's wherever the reference's
// top two are more than twice the elementwise bound apart.
void expect_logits_follow(const Tensor& logits, const Tensor& reference, const std::string& what) {
  const double bound = kLogitsTol * max_abs(reference);
  test::expect_close(logits, reference, kLogitsTol, bound, what);
  const std::vector<int32_t> got = test::argmax_rows(logits), want = test::argmax_rows(reference);
  const std::vector<float> ref = reference.to(Device::cpu()).contiguous().to_vector<float>();
  const size_t V = size_t(reference.size(1));
  for (size_t r = 0; r < got.size(); ++r) {
    std::vector<float> row(ref.begin() + ptrdiff_t(r * V), ref.begin() + ptrdiff_t((r + 1) * V));
    std::nth_element(row.begin(), row.begin() + 1, row.end(), std::greater<float>());
    if (row[0] - row[1] > 2 * bound) {
      EXPECT_EQ(got[r], want[r]) << what << ", row " << r;
    }
  }
}

struct GpuModel {
  ModelConfig config;
  ParameterRegistry params;
  std::unique_ptr<layers::DecoderLM> model;
  GpuModel(const Case& c, uint64_t seed) : config(decoding_config(c)) {
    model = std::make_unique<layers::DecoderLM>(config, params);
    params.materialize(Device::cuda(), DType::BF16, seed);
  }
};

class DecodingCuda : public ::testing::TestWithParam<Case> {};

// Greedy decoding on the GPU against a GPU full forward at every step, then the CPU (f32, on the GPU's bf16 weights)
// decoding the same tokens.
TEST_P(DecodingCuda, GreedyTokensFollowAFullForwardAtEveryStepAndTheCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  GpuModel gpu(GetParam(), seed);
  const int64_t B = 2, prompt = 6, steps = 8;
  const Tensor ids = test::rand_ints({B, prompt}, seed + 1, 0, gpu.config.vocab_size);
  std::vector<Tensor> gpu_logits;
  const std::vector<int32_t> tokens = test::decode_against_full_forward(
      *gpu.model, ids.to(Device::cuda()), steps, [&](const Tensor& decoded, const Tensor& full, int64_t t) {
        expect_logits_follow(decoded, full,
                             "GPU decoding against the GPU forward after " + std::to_string(t) + " tokens");
        gpu_logits.push_back(decoded.to(Device::cpu()));
      });

  ParameterRegistry cpu_params;
  layers::DecoderLM cpu_model(gpu.config, cpu_params);
  cpu_params.materialize(Device::cpu(), DType::F32, seed);
  for (Parameter* p : cpu_params.all())
    p->var->value = gpu.params.get(p->name).var->value.to(Device::cpu()).to(DType::F32);
  layers::DecodeState state;
  Tensor logits = cpu_model.decode(ids, state);
  for (int64_t s = 0; s < steps; ++s) {
    expect_logits_follow(gpu_logits[size_t(s)], logits, "GPU against CPU decoding, step " + std::to_string(s));
    std::vector<int32_t> next;
    for (int64_t b = 0; b < B; ++b) next.push_back(tokens[size_t(b * steps + s)]);
    logits = cpu_model.decode(Tensor::from_vector(next, {B, 1}, DType::I32), state);
  }
}

// As recipes::generate batches prompts: each prefilled alone, the states stacked, the rows decoded together at their
// own positions. Each row's logits follow that prompt decoded alone on the same tokens (within the bf16 tolerance, not
// bit for bit: a GEMM over 4 rows may pick another kernel, and so another summation order, than over 1).
TEST_P(DecodingCuda, PromptsOfDifferentLengthsDecodeTogetherAsTheyDoAlone) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  GpuModel gpu(GetParam(), seed);
  const std::vector<int64_t> lengths{1, 9, 3, 14};
  const int64_t B = int64_t(lengths.size()), steps = 6;
  std::vector<Tensor> prompts;
  std::vector<layers::DecodeState> prefilled(lengths.size());
  std::vector<Tensor> first;
  for (size_t r = 0; r < lengths.size(); ++r) {
    prompts.push_back(
        test::rand_ints({1, lengths[r]}, seed + 1 + r, 0, gpu.config.vocab_size, DType::I32, Device::cuda()));
    first.push_back(gpu.model->decode(prompts.back(), prefilled[r]));
  }
  layers::DecodeState state = layers::stack_rows(prefilled);
  std::vector<std::vector<float>> batch_logits;  // per step, [B, V]
  std::vector<std::vector<int32_t>> batch_tokens;
  Tensor logits = Tensor::empty({B, gpu.config.vocab_size}, DType::F32, Device::cuda());
  for (size_t r = 0; r < first.size(); ++r) logits.slice(0, int64_t(r), int64_t(r) + 1).copy_from(first[r]);
  for (int64_t s = 0; s < steps; ++s) {
    batch_logits.push_back(logits.to(Device::cpu()).to_vector<float>());
    batch_tokens.push_back(test::argmax_rows(logits));
    logits = gpu.model->decode(Tensor::from_vector(batch_tokens.back(), {B, 1}, DType::I32, Device::cuda()), state);
  }
  EXPECT_EQ(state.tokens, (std::vector<int64_t>{1 + steps, 9 + steps, 3 + steps, 14 + steps}));
  const int64_t V = gpu.config.vocab_size;
  for (int64_t r = 0; r < B; ++r) {
    layers::DecodeState alone;
    Tensor own = gpu.model->decode(prompts[size_t(r)], alone);
    for (int64_t s = 0; s < steps; ++s) {
      const std::vector<float> row(batch_logits[size_t(s)].begin() + r * V,
                                   batch_logits[size_t(s)].begin() + (r + 1) * V);
      expect_logits_follow(Tensor::from_vector(row, {1, V}, DType::F32), own,
                           "row " + std::to_string(r) + " in the batch against alone, step " + std::to_string(s));
      own = gpu.model->decode(Tensor::from_vector(std::vector<int32_t>{batch_tokens[size_t(s)][size_t(r)]}, {1, 1},
                                                  DType::I32, Device::cuda()),
                              alone);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryCudaMixer, DecodingCuda, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace primer
