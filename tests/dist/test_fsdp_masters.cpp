// FSDP's frozen groups give up their f32 master shards where the bf16 compute shards hold every element on every
// rank (Fsdp::release_frozen_masters, what Stage 1's teacher does), on 1 to 3 ranks and ZeRO-0, -1 and -3, on the CPU
// and (skipped without one) the GPU, through NCCL on one rank and MPI staging on two:
//   - only those groups release, on all ranks alike: one element bf16 would round, on the last rank's shard, keeps
//     its group's master everywhere;
//   - a checkpoint written afterwards holds the exact values and restores into a model that kept its masters;
//   - the export gather returns the original weights bit for bit;
//   - writing masters afterwards (a restore) is refused instead of being lost.
// The values are compared bitwise: nothing here rounds, so any difference is a wrong element.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/cuda_runtime.h"
#include "parallel/fsdp/fsdp.h"
#include "recipes/train_setup.h"
#include "tests/dist/dist_env.h"
#include "tests/dist/train_harness.h"
#include "tests/support/test_util.h"

namespace primer::test {
namespace {

// Two units: the teacher's weights (two frozen groups: with and without weight decay) and a frozen group with one
// inexact element beside the trainable student.
std::vector<ag::UnitSpec> declare(ParameterRegistry& params) {
  params.add("teacher.a", {5, 7}, InitRule::normal(0.02));
  params.add("teacher.b", {9}, InitRule::normal(0.02), false);
  params.add("teacher.c", {11}, InitRule::normal(0.02));
  params.add("student.d", {4, 3}, InitRule::normal(0.02));
  return {{{"teacher.a", "teacher.b"}}, {{"teacher.c", "student.d"}}};
}

// The registry as loaded from bf16 weights, but for teacher.c's last element (on the last rank's shard).
void load_bf16_weights(ParameterRegistry& params, Device device, uint64_t seed) {
  params.materialize(device, DType::BF16, seed);
  for (Parameter* p : params.all()) p->master.copy_from(p->master.to(DType::BF16));
  const Tensor c = params.get("teacher.c").master;
  std::vector<float> host = c.to_vector<float>();
  host[10] = std::nextafter(host[10], 1.0f);
  c.copy_from(Tensor::from_vector(host, c.shape(), DType::F32));
  params.sync_compute_copies();
  params.set_trainable({"student."});
}

std::map<std::string, std::vector<float>> values(ParameterRegistry& params) {
  std::map<std::string, std::vector<float>> out;
  for (Parameter* p : params.all()) out[p->name] = p->exact_value().to_vector<float>();
  return out;
}

void expect_frozen_masters_released(parallel::Communicator& comm, Device device) {
  const int P = comm.size();
  const std::string dir = shared_test_dir("fsdp-masters");
  Tensor seed_t = Tensor::full({1}, double(fresh_seed() % 1000000), DType::F64);
  world_comm().broadcast(seed_t, 0, "seed");  // host tensors: the CPU communicator
  const uint64_t seed = uint64_t(seed_t.item());
  for (const int stage : {0, 1, 3}) {
    SCOPED_TRACE(
        fmt::format("seed {}, ZeRO-{} on {} ranks, {} ({})", seed, stage, P, device.str(), comm.backend_name()));
    ParameterRegistry params;
    const std::vector<ag::UnitSpec> units = declare(params);
    load_bf16_weights(params, device, seed);
    const std::map<std::string, std::vector<float>> loaded = values(params);
    parallel::Fsdp fsdp(params, units, comm, parallel::zero_stage_from_int(stage));
    optim::AdamW optimizer(fsdp.shards(), {});
    optimizer.init_state();

    // teacher.a and teacher.b release their shards; teacher.c keeps its master on every rank.
    const auto shard = [&](int64_t n) { return stage == 0 ? n : (n + P - 1) / P; };
    const int64_t freed = fsdp.release_frozen_masters();
    EXPECT_EQ(freed, (shard(35) + shard(9)) * 4);
    EXPECT_EQ(fsdp.footprint().released_master_bytes, freed);
    EXPECT_EQ(fsdp.release_frozen_masters(), 0);  // nothing left to release
    for (const parallel::ParameterChunk& c : fsdp.chunks(false)) {
      const bool released = c.param->name == "teacher.a" || c.param->name == "teacher.b";
      EXPECT_EQ(c.master.defined(), !released) << c.param->name;
      EXPECT_EQ(c.compute.defined(), released) << c.param->name;
    }

    // Saved after the release, restored into the same model that kept its masters (other initial values).
    recipes::CheckpointManager checkpoints(fmt::format("{}/zero{}", dir, stage), 0, &world_comm());
    recipes::TrainingState state;
    state.step = 1;
    const std::string saved = checkpoints.save(state, recipes::sharded_content(params, fsdp, optimizer));
    ParameterRegistry restored_params;
    const std::vector<ag::UnitSpec> restored_units = declare(restored_params);
    load_bf16_weights(restored_params, device, seed + 1);
    parallel::Fsdp restored(restored_params, restored_units, comm, parallel::zero_stage_from_int(stage));
    optim::AdamW restored_optimizer(restored.shards(), {});
    restored_optimizer.init_state();
    checkpoints.load(saved, recipes::sharded_content(restored_params, restored, restored_optimizer));
    restored.masters_changed();
    restored.gather_full_masters();
    EXPECT_EQ(values(restored_params), loaded) << "restored from a checkpoint of released masters";

    // A restore into the released model is refused, and so is a refresh from its masters.
    EXPECT_THROW(checkpoints.load(saved, recipes::sharded_content(params, fsdp, optimizer)), Error);
    EXPECT_THROW(fsdp.masters_changed(), Error);

    fsdp.gather_full_masters();
    EXPECT_EQ(values(params), loaded) << "gathered for export";
    EXPECT_FALSE(params.get("teacher.a").master.defined());
    EXPECT_EQ(params.get("teacher.a").exact_value().dtype(), DType::BF16);
    comm.barrier("fsdp masters checked");
  }
}

TEST(DistFsdpMasters, FrozenGroupsThatBf16HoldsReleaseTheirMasters) {
  expect_frozen_masters_released(world_comm(), Device::cpu());
}

TEST(DistFsdpMastersGpu, FrozenGroupsThatBf16HoldsReleaseTheirMasters) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device";
  expect_frozen_masters_released(gpu_world_comm(), Device::cuda(cuda::current_device()));
}

}  // namespace
}  // namespace primer::test
