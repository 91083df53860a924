// Decoding from carried state (layers::DecodeState): for every mixer and a hybrid of them, the tokens decoded greedily
// one step at a time after a prefilled prompt equal the argmax of a full forward recomputed over the whole sequence
// at every step, with the same logits; attention's key/value cache (full and sliding window) continues a forward
// exactly, as the recurrent mixers' states do, growing by appending (amortised) rather than copying itself.
#include <gtest/gtest.h>

#include <algorithm>

#include "layers/attention_mixer.h"
#include "layers/decoder_lm.h"
#include "layers/hybrid_config.h"
#include "layers/kv_cache.h"
#include "tests/support/decoding_checks.h"
#include "tests/support/mixer_checks.h"

namespace primer {
namespace {

struct Case {
  const char* name;
  const char* pattern;         // "" for a Transformer
  int64_t sliding_window = 0;  // the model's (Mistral-style) window
};

const Case kCases[] = {{"Attention", ""},  {"MistralWindow", "", 4},
                       {"SWA", "*-SWA"},   {"M2", "*-M2"},
                       {"GDN", "*-GDN"},   {"GKA", "*-GKA"},
                       {"KZLA", "*-KZLA"}, {"KLA", "*-KLA"},
                       {"GDN2", "*-GDN2"}, {"Hybrid", "SWA-M2-GDN-*-GKA-KZLA-KLA-GDN2"}};

ModelConfig decoding_config(const Case& c) {
  const std::string pattern = c.pattern;
  const int64_t layers = pattern.empty() ? 2 : int64_t(std::count(pattern.begin(), pattern.end(), '-') + 1);
  ModelConfig config = test::tiny_mixer_config(4, 2, layers);
  config.vocab_size = 32;
  config.qk_norm = true;
  config.sliding_window = c.sliding_window;
  if (!pattern.empty()) config.layer_types = parse_hybrid_pattern(pattern, "test");
  config.swa.window_size = 3;  // smaller than the 13 tokens decoded
  config.validate("test");
  return config;
}

class Decoding : public ::testing::TestWithParam<Case> {};

TEST_P(Decoding, GreedyTokensEqualTheArgmaxOfAFullForwardAtEveryStep) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = decoding_config(GetParam());
  ParameterRegistry params;
  layers::DecoderLM model(c, params);
  params.materialize(Device::cpu(), DType::F64, seed);
  const int64_t B = 2, prompt = 5, steps = 8;
  const Tensor ids = test::rand_ints({B, prompt}, seed + 1, 0, c.vocab_size);
  test::decode_against_full_forward(model, ids, steps, [](const Tensor& decoded, const Tensor& full, int64_t t) {
    test::expect_close(decoded, full, 1e-6, 1e-6, "logits after " + std::to_string(t) + " tokens");
    EXPECT_EQ(test::argmax_rows(decoded), test::argmax_rows(full)) << "after " << t << " tokens";
  });
}

INSTANTIATE_TEST_SUITE_P(EveryMixer, Decoding, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The attention layer alone: token-by-token decoding from its cache equals the forward, and the cache of a sliding
// window keeps only the window.
TEST(AttentionKvCache, DecodingMatchesTheForward) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const int64_t window : {int64_t(0), int64_t(3)}) {
    ModelConfig c = test::tiny_mixer_config(4, 2);
    c.qk_norm = true;
    ParameterRegistry params;
    layers::AttentionMixer mixer(c, "attn", params, window);
    params.materialize(Device::cpu(), DType::F64, seed);
    const int64_t B = 2, T = 7;
    layers::MixerContext ctx;
    std::vector<int32_t> p;
    for (int64_t b = 0; b < B; ++b)
      for (int32_t t = 0; t < T; ++t) p.push_back(t);
    ctx.positions = Tensor::from_vector(p, {B, T}, DType::I32);
    ctx.inv_freq = rope_inv_freq_for(c);
    const Tensor x = test::randn({B, T, c.hidden_size}, seed + 1);
    test::expect_decoding_matches_forward(mixer, x, {}, ctx, 1e-12);

    layers::MixerState state;
    ag::NoGrad no_grad;
    mixer.forward(ag::constant(x), ctx, nullptr, &state);
    ASSERT_EQ(state.kv.size(), size_t(B));
    EXPECT_EQ(state.kv[0].size(), window ? window : T);
    EXPECT_EQ(state.kv[0].first_position(), window ? T - window : 0);
  }
}

// A step over a cache of 4096 keys or more attends in chunks merged by their log-sum-exps
// (ops::attention_over_cache): the steps after a long prefill equal the forward over the whole sequence.
TEST(AttentionKvCache, StepsOverALongCacheMatchTheForward) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ModelConfig c = test::tiny_mixer_config(4, 2);
  c.max_position_embeddings = 8192;
  ParameterRegistry params;
  layers::AttentionMixer mixer(c, "attn", params, 0);
  params.materialize(Device::cpu(), DType::F64, seed);
  const int64_t prompt = 4100, steps = 3, T = prompt + steps;
  std::vector<int32_t> p(static_cast<size_t>(T));
  for (int32_t t = 0; t < int32_t(T); ++t) p[size_t(t)] = t;
  auto context = [&](int64_t from, int64_t to) {
    layers::MixerContext ctx;
    ctx.positions =
        Tensor::from_vector(std::vector<int32_t>(p.begin() + from, p.begin() + to), {1, to - from}, DType::I32);
    ctx.inv_freq = rope_inv_freq_for(c);
    return ctx;
  };
  const Tensor x = test::randn({1, T, c.hidden_size}, seed + 1);
  ag::NoGrad no_grad;
  const Tensor whole = mixer.forward(ag::constant(x), context(0, T))->value;
  layers::MixerState state;
  mixer.forward(ag::constant(x.slice(1, 0, prompt)), context(0, prompt), nullptr, &state);
  for (int64_t t = prompt; t < T; ++t) {
    layers::MixerState next;
    const Tensor y = mixer.forward(ag::constant(x.slice(1, t, t + 1)), context(t, t + 1), &state, &next)->value;
    test::expect_close(y, whole.slice(1, t, t + 1), 1e-12, 1e-12, "step at position " + std::to_string(t));
    state = std::move(next);
  }
}

// The cache grows by appending into buffers with room: over n one-token appends the buffers are replaced O(log n)
// times for full attention, a bounded number of times per window for a sliding window; what it holds is the tokens
// appended, in order, and a copy that another copy has appended past never sees the other's tokens.
TEST(AttentionKvCache, AppendsIntoGrowingBuffersAndCopiesBranchApart) {
  auto token = [](int64_t i) { return Tensor::full({1, 1, 2, 3}, double(i), DType::F32); };
  for (const int64_t window : {int64_t(0), int64_t(5)}) {
    layers::KvCache cache;
    int64_t replaced = 0, capacity = 0;
    const int64_t n = 1000;
    for (int64_t i = 0; i < n; ++i) {
      cache.append(token(i), token(-i));
      if (window > 0) cache.keep_last(window);
      if (cache.capacity() != capacity) ++replaced;
      capacity = cache.capacity();
    }
    const int64_t kept = window ? window : n;
    ASSERT_EQ(cache.size(), kept);
    EXPECT_EQ(cache.first_position(), n - kept);
    const std::vector<float> keys = cache.keys().contiguous().to_vector<float>();
    const std::vector<float> values = cache.values().contiguous().to_vector<float>();
    for (int64_t j = 0; j < kept; ++j) {
      EXPECT_EQ(keys[size_t(j * 6)], float(n - kept + j));
      EXPECT_EQ(values[size_t(j * 6 + 5)], -float(n - kept + j));
    }
    if (window == 0) {
      EXPECT_LE(replaced, 12);  // doubling: log2(1000) + 1
    } else {
      EXPECT_LE(capacity, 2 * (window + 1));
    }
    EXPECT_TRUE(cache.keys().is_contiguous());

    layers::KvCache branch = cache;  // shares the buffers
    cache.append(token(7777), token(7777));
    branch.append(token(4242), token(4242));
    EXPECT_EQ(cache.keys().contiguous().to_vector<float>().back(), 7777.f);
    EXPECT_EQ(branch.keys().contiguous().to_vector<float>().back(), 4242.f);
    EXPECT_EQ(cache.size(), branch.size());
  }
}

}  // namespace
}  // namespace primer
