// `primer eval` under mpirun: rank r of n scores held-out batches r, r + n, ... and the losses and token counts
// summed over the ranks give the one-process result (recipes/evaluate.h), also when the batches do not divide evenly
// among the ranks.
//
// Tolerance. Both compute in f32 on the same batches; one process adds every batch's loss sum into one f32
// accumulator, the ranks each add theirs and then sum the ranks' totals in f64. Only the order and grouping of those
// additions differ: a few units of 2^-24 ≈ 6e-8 relative over five batches. 1e-6 relative keeps a factor of over ten;
// a batch scored twice or missed changes the token count, which is compared exactly.
#include <gtest/gtest.h>

#include <filesystem>

#include "layers/decoder_lm.h"
#include "layers/hf_checkpoint.h"
#include "recipes/evaluate.h"
#include "tests/dist/dist_env.h"
#include "tests/dist/train_harness.h"
#include "tests/support/mixer_checks.h"
#include "tests/support/test_util.h"

namespace primer::test {
namespace {

TEST(DistEval, RanksShareTheBatchesAndGiveTheOneProcessResult) {
  const std::string dir = shared_test_dir("eval");
  const std::string model_dir = dir + "/hf";
  if (world_comm().rank() == 0) {  // a random byte-level Qwen3 as a Hugging Face directory
    ModelConfig c = tiny_mixer_config(4, 2, 2);
    c.vocab_size = 256;
    c.qk_norm = true;  // as config.json's qwen3 reads back
    c.validate("test");
    ParameterRegistry params;
    layers::DecoderLM model(c, params);
    params.materialize(Device::cpu(), DType::F32, 17);
    layers::export_hf(model_dir, c, params, DType::F32);
  }
  world_comm().barrier("model written");
  recipes::EvalOptions options;
  options.model = model_dir;
  options.data = PRIMER_SOURCE_DIR "/tests/data/dist_corpus.txt";
  options.val_size = 0.5;
  options.cutoff_len = 16;
  options.batch_size = 2;
  options.max_batches = 5;  // 3 batches on rank 0 and 2 on rank 1 (of 2 ranks)
  const json::Value alone = recipes::evaluate(options);
  const json::Value shared = recipes::evaluate(options, &world_comm());
  const json::Object &a = alone.as_object(), &s = shared.as_object();
  const double loss = a.find("loss")->as_double();
  EXPECT_NEAR(s.find("loss")->as_double(), loss, 1e-6 * loss);
  EXPECT_EQ(s.find("tokens")->as_int(), 5 * 2 * 16);
  EXPECT_EQ(s.find("tokens")->as_int(), a.find("tokens")->as_int());
  EXPECT_EQ(s.find("batches")->as_int(), 5);
  world_comm().barrier("eval checked");
  if (world_comm().rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace primer::test
