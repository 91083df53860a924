// Model states per rank under each ZeRO stage, measured: the Qwen3-0.6B shape (decoder layers as asked) laid out
// by parallel::Fsdp over the ranks of the job, with bf16 compute copies, f32 masters, AdamW moments and the gradient
// buffers each stage keeps resident; the bytes this rank's allocator holds afterwards (largest rank), next to the
// ZeRO paper's count for the same Ψ; and the peak while starting, materializing the whole model first against FSDP's
// sharded start-up. Runs on the CPU (no step is taken, so any machine measures the layout).
// Usage: [mpirun -np N] bench_fsdp_states [--layers L]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "layers/decoder_lm.h"
#include "optim/adamw.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/world_communicator.h"
#include "parallel/fsdp/fsdp.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

std::string gb(double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f", bytes / 1e9);
  return s;
}

struct States {
  double held = 0, psi = 0, startup_peak = 0;  // bytes (largest rank), parameters
};

double max_over_ranks(double v, parallel::Communicator& comm) {
  Tensor t = Tensor::full({1}, v, DType::F64);
  comm.all_reduce(t, parallel::ReduceOp::Max, "states");
  return t.item();
}

// Model states this rank holds after laying the model out at `stage` (largest rank), Ψ, and the peak while
// starting: materializing the whole model first, or FSDP's sharded start-up (each parameter's value drawn on the
// host and laid straight into the rank's buffers, as `primer train` does).
States measure(int stage, int64_t layers, parallel::Communicator& comm, bool sharded_startup) {
  const size_t before = memory_stats(Device::cpu()).current;
  reset_peak_memory(Device::cpu());
  States s;
  {
    ParameterRegistry params;
    layers::DecoderLM model(bench::qwen3_shape("0.6b", layers), params, {true});
    s.psi = double(params.count());
    const auto zero = parallel::zero_stage_from_int(stage);
    std::unique_ptr<parallel::Fsdp> fsdp;
    if (sharded_startup) {
      params.set_compute_dtype(DType::BF16);
      fsdp = std::make_unique<parallel::Fsdp>(params, model.units(), comm, zero, Device::cpu(), initial_values(0));
    } else {
      params.materialize(Device::cpu(), DType::BF16, 0);
      fsdp = std::make_unique<parallel::Fsdp>(params, model.units(), comm, zero);
    }
    s.startup_peak = max_over_ranks(double(memory_stats(Device::cpu()).peak - before), comm);
    optim::AdamW adamw(fsdp->shards(), {});
    adamw.init_state();
    s.held = max_over_ranks(double(memory_stats(Device::cpu()).current - before), comm);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  parallel::WorldScope world(argc, argv);
  int64_t layers = 28;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--layers") == 0) layers = std::atoll(argv[i + 1]);
  const auto comm = parallel::make_world_communicator(Device::cpu(), {.timeout_seconds = 600});
  const double n = comm->size();
  std::printf(
      "# bench_fsdp_states — Qwen3-0.6B shape (%lld layers), bf16 compute copies, f32 masters, gradients and "
      "AdamW moments, %d rank(s) — %s\n",
      static_cast<long long>(layers), comm->size(), bench::today().c_str());
  std::vector<bench::Row> rows;
  for (int stage = 0; stage <= 3; ++stage) {
    const States materialized = measure(stage, layers, *comm, false), direct = measure(stage, layers, *comm, true);
    const double psi = direct.psi;
    // ZeRO-1 keeps the full f32 gradient for accumulation and reduce-scatters it into a shard of its own: 16Ψ/N.
    const double formula[] = {18 * psi, 6 * psi + 16 * psi / n, 2 * psi + 16 * psi / n, 18 * psi / n};
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f", direct.held / formula[stage]);
    rows.push_back({{"ZeRO-" + std::to_string(stage), std::to_string(comm->size()), gb(direct.held), gb(formula[stage]),
                     ratio, gb(materialized.startup_peak), gb(direct.startup_peak)}});
  }
  bench::print_table({"stage", "ranks", "measured GB (largest rank)", "formula GB", "measured / formula",
                      "start-up peak GB, materializing first", "start-up peak GB, sharded start-up"},
                     rows);
  return 0;
}
