// Selective recomputation on the GPU (tests/cpu/test_decoder_lm.cpp has the CPU side, bit for bit): a bf16
// attention/GKA/Mamba-2/GDN hybrid's parameter gradients with its blocks recomputed but attention's output and
// log-sum-exp, the Chebyshev solve's x, the GLA readouts' and the gated delta rule's o and the output projections kept
// from the first forward, against whole blocks recomputed.
//
// The kept results are the very values a recompute forms (the same kernels on the same inputs); the GKA backward then
// recomputes the chunk-start states it would otherwise have been handed, and the GLA backward forms any operand the
// skipped forward would have formed (the same kernels again). What may
// still differ is what is not bitwise repeatable from run to run at all: the attention backward adds dQ by TMA
// reduce-adds in arrival order, so its f32 sums (and every gradient downstream) can round differently. That is of the
// order of one bf16 rounding of an activation gradient (2^-9 relative), which the bf16 parity bound (4e-3 rel L2,
// tests/cuda/parity_util.h) covers; a wrong kept result (another block's, a stale one) is O(1).
#include <gtest/gtest.h>

#include "layers/decoder_lm.h"
#include "layers/hybrid_config.h"
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

ModelConfig hybrid_config() {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 256;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 64;
  c.max_position_embeddings = 512;
  c.qk_norm = true;
  c.layer_types = parse_hybrid_pattern("*-GKA-M2-GDN", "test");
  c.gka.ridge_strength = 0.5;  // κ = 3, as the decoding tests: bf16 rounding of the solve not amplified
  c.validate("test");
  return c;
}

TEST(RecomputeCuda, KeptResultsGiveTheGradientsOfWholeBlocksRecomputed) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig config = hybrid_config();
  const Tensor ids = test::rand_ints({2, 200}, seed + 1, 0, 256).to(Device::cuda());
  const Tensor targets = test::rand_ints({2, 200}, seed + 2, 0, 256).to(Device::cuda());
  auto grads = [&](bool selective) {
    ParameterRegistry params;
    layers::DecoderLM model(config, params, {.recompute = true, .selective_recompute = selective});
    params.materialize(Device::cuda(), DType::BF16, seed);
    ag::backward(model.loss(ids, targets, 1.0 / 400));
    std::vector<std::pair<std::string, Tensor>> out;
    for (Parameter* p : params.all()) out.emplace_back(p->name, test::cpu_f64(p->var->grad));
    return out;
  };
  const auto whole = grads(false), kept = grads(true);
  ASSERT_EQ(whole.size(), kept.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    SCOPED_TRACE(whole[i].first);
    test::expect_close(kept[i].second, whole[i].second, test::parity_tolerance(DType::BF16), 1e30,
                       whole[i].first.c_str());
  }
}

}  // namespace
}  // namespace primer
