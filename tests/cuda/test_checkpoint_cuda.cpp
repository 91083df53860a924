// Checkpoints of parameters living on the GPU (bf16 compute copies): a round trip through the host restores
// masters and AdamW moments bit for bit and refreshes the bf16 compute copies.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "recipes/checkpoint.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {
namespace fs = std::filesystem;

void declare(ParameterRegistry& params) {
  params.add("model.embed_tokens.weight", {33, 16}, InitRule::normal(0.5));
  params.add("model.layers.0.mlp.up_proj.weight", {16, 48}, InitRule::normal(0.3));
  params.add("model.norm.weight", {16}, InitRule::constant(1.0), false);
}

TEST(CheckpointCuda, RoundTripOfGpuParametersIsBitExact) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const fs::path dir = fs::temp_directory_path() / fmt::format("primer-test-ckpt-cuda-{}-{}", ::getpid(), seed);
  fs::remove_all(dir);
  const Device gpu = Device::cuda(0);

  ParameterRegistry saved;
  declare(saved);
  saved.materialize(gpu, DType::BF16, seed);
  optim::AdamW saved_adamw(saved, {});
  for (Parameter* p : saved.all()) p->var->grad = test::randn(p->shape, seed + p->name.size(), DType::F32, gpu);
  saved_adamw.step(1e-2);
  recipes::CheckpointManager manager(dir.string(), 1);
  const std::string committed = manager.save({1, seed, "cursor", "config"}, saved, saved_adamw);

  ParameterRegistry loaded;
  declare(loaded);
  loaded.materialize(gpu, DType::BF16, seed + 1);
  optim::AdamW loaded_adamw(loaded, {});
  EXPECT_EQ(manager.load(committed, loaded, loaded_adamw).step, 1);
  EXPECT_EQ(loaded_adamw.steps(), 1);
  for (Parameter* p : saved.all()) {
    SCOPED_TRACE(p->name);
    Parameter& q = loaded.get(p->name);
    EXPECT_TRUE(q.master.is_cuda());
    EXPECT_EQ(q.master.to_vector<float>(), p->master.to_vector<float>());
    EXPECT_EQ(q.var->value.to_vector<float>(), p->var->value.to_vector<float>());  // bf16 copies refreshed
    EXPECT_EQ(loaded_adamw.first_moment(p->name).to_vector<float>(),
              saved_adamw.first_moment(p->name).to_vector<float>());
    EXPECT_EQ(loaded_adamw.second_moment(p->name).to_vector<float>(),
              saved_adamw.second_moment(p->name).to_vector<float>());
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace primer
