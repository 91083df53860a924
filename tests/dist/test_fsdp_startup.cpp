// FSDP's sharded start-up (the Fsdp constructor that takes each parameter's value from a ParameterValues, as
// `primer train` builds its model) lays out the same shards and compute weights, bit for bit, as materializing the
// whole model first and sharding it, from the init rules and from a Hugging Face checkpoint, on 1 to 3 ranks and
// ZeRO-0 to -3; and it holds less while it does: under ZeRO-3 no rank's peak reaches the whole model's size. On the
// CPU and (skipped without one) the GPU, through NCCL on one rank and MPI staging on two.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/io/safetensors.h"
#include "core/storage.h"
#include "layers/hf_checkpoint.h"
#include "parallel/fsdp/fsdp.h"
#include "tests/dist/dist_env.h"
#include "tests/dist/train_harness.h"
#include "tests/support/test_util.h"

namespace primer::test {
namespace {

constexpr int kUnits = 24;

// kUnits units of equal size (so that one unit, and one parameter in flight with its host staging, is a small part
// of the model), mostly frozen (as Stage 1's teacher, so that gradient shards do not dominate what a rank keeps): a
// trainable weight with decay, a norm without, an f32-kept gate (its own group under bf16) and a frozen projection.
constexpr int64_t kUnitElements = 6 * 5 + 17 + 5 + 12 * 17, kLargestElements = 12 * 17;
std::vector<ag::UnitSpec> declare(ParameterRegistry& params) {
  std::vector<ag::UnitSpec> units;
  for (int u = 0; u < kUnits; ++u) {
    const std::string p = "layers." + std::to_string(u);
    params.add(p + ".weight", {6, 5}, InitRule::normal(0.02));
    params.add(p + ".norm", {17}, InitRule::constant(1.0), false);
    params.add(p + ".A_log", {5}, InitRule::log_uniform(1e-4, 16.0), false).keep_f32 = true;
    params.add(p + ".frozen", {12, 17}, InitRule::uniform(-0.5, 0.5));
    units.push_back({{p + ".weight", p + ".norm", p + ".A_log", p + ".frozen"}});
  }
  params.set_trainable({".weight", ".norm", ".A_log"});
  return units;
}

// Every element this rank holds: its shards (masters and compute copies, group by group), then the parameters'
// compute views where resident (all but ZeRO-3's gathered weights).
std::vector<std::vector<float>> layout(ParameterRegistry& params, parallel::Fsdp& fsdp, bool resident) {
  std::vector<std::vector<float>> out;
  for (Parameter* shard : fsdp.shards().all()) {
    out.push_back(shard->master.to_vector<float>());
    out.push_back(shard->var->value.to_vector<float>());
  }
  if (resident)
    for (Parameter* p : params.all()) out.push_back(p->var->value.to_vector<float>());
  return out;
}

struct Built {
  std::vector<std::vector<float>> layout;
  size_t peak = 0, kept = 0;  // bytes above what was allocated before, on the device: at most, and afterwards
};

// Materialized first (load: from `hf_dir`, else from the init rules), or laid out from the values directly.
Built build(parallel::Communicator& comm, Device device, DType compute, int stage, uint64_t seed,
            const std::string& hf_dir, bool sharded_startup) {
  if (device.is_cuda()) cuda::synchronize();
  const size_t before = memory_stats(device).current;
  reset_peak_memory(device);
  Built built;
  {
    ParameterRegistry params;
    const std::vector<ag::UnitSpec> units = declare(params);
    std::unique_ptr<parallel::Fsdp> fsdp;
    if (sharded_startup) {
      params.set_compute_dtype(compute);
      const ParameterValues values = hf_dir.empty() ? initial_values(seed) : layers::hf_weight_values(hf_dir, params);
      fsdp =
          std::make_unique<parallel::Fsdp>(params, units, comm, parallel::zero_stage_from_int(stage), device, values);
    } else {
      params.materialize(device, compute, seed);
      if (!hf_dir.empty()) layers::load_hf_weights(hf_dir, params);
      fsdp = std::make_unique<parallel::Fsdp>(params, units, comm, parallel::zero_stage_from_int(stage));
    }
    if (device.is_cuda()) cuda::synchronize();
    built.peak = memory_stats(device).peak - before;
    built.kept = memory_stats(device).current - before;
    built.layout = layout(params, *fsdp, stage != 3);
  }
  return built;
}

void expect_sharded_startup_equals_materializing(parallel::Communicator& comm, Device device, DType compute) {
  const int P = comm.size();
  Tensor seed_t = Tensor::full({1}, double(fresh_seed() % 1000000), DType::F64);
  world_comm().broadcast(seed_t, 0, "seed");  // host tensors: the CPU communicator
  const uint64_t seed = uint64_t(seed_t.item());

  // A checkpoint whose values no init rule draws (another seed, rounded to bf16 as a Hugging Face export is).
  const std::string hf_dir = shared_test_dir("fsdp-startup") + "/hf";
  if (world_comm().rank() == 0) {
    ParameterRegistry params;
    declare(params);
    params.materialize(Device::cpu(), DType::F32, seed + 7);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (Parameter* p : params.all()) tensors.emplace_back(p->name, p->master.to(DType::BF16));
    io::write_safetensors(hf_dir, tensors, io::kNoShardLimit, {});
  }
  world_comm().barrier("checkpoint written");

  for (const int stage : {0, 1, 2, 3})
    for (const bool from_checkpoint : {false, true}) {
      SCOPED_TRACE(fmt::format("seed {}, ZeRO-{} on {} ranks, {}, {} compute on {} ({})", seed, stage, P,
                               from_checkpoint ? "from a checkpoint" : "from the init rules", dtype_name(compute),
                               device.str(), comm.backend_name()));
      const std::string dir = from_checkpoint ? hf_dir : "";
      const Built materialized = build(comm, device, compute, stage, seed, dir, false);
      const Built sharded = build(comm, device, compute, stage, seed, dir, true);
      EXPECT_EQ(sharded.layout, materialized.layout);
      // Materializing holds the whole model's masters at once. Laid out directly, a rank holds at most what it
      // keeps, one unit's flat buffers (compute and gradient) and one parameter in flight with its host staging
      // (counted on the device on the CPU): under ZeRO-3 on 3 ranks, less than the whole model.
      const size_t whole = size_t(kUnits * kUnitElements) * sizeof(float);
      const size_t in_flight = 2 * size_t(kUnitElements) * sizeof(float) + 24 * size_t(kLargestElements);
      EXPECT_GE(materialized.peak, whole);
      EXPECT_LE(sharded.peak, sharded.kept + in_flight) << "kept " << sharded.kept;
      if (stage == 3 && P >= 3) {
        EXPECT_LT(sharded.peak, whole) << "materialized peak " << materialized.peak;
      }
      std::printf(
          "ZeRO-%d, %d ranks, %s, %s: peak %zu bytes materializing first, %zu laid out directly, keeping "
          "%zu (model %zu)\n",
          stage, P, from_checkpoint ? "checkpoint" : "init", dtype_name(compute), materialized.peak, sharded.peak,
          sharded.kept, whole);
    }
  comm.barrier("fsdp start-up checked");
}

TEST(DistFsdpStartup, ShardedStartUpEqualsMaterializingFirst) {
  for (const DType compute : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(compute));
    expect_sharded_startup_equals_materializing(world_comm(), Device::cpu(), compute);
  }
}

TEST(DistFsdpStartupGpu, ShardedStartUpEqualsMaterializingFirst) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device";
  expect_sharded_startup_equals_materializing(gpu_world_comm(), Device::cuda(cuda::current_device()), DType::BF16);
}

}  // namespace
}  // namespace primer::test
