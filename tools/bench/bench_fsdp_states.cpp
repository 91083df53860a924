// Model states per rank under each ZeRO stage, measured: the Qwen3-0.6B shape (decoder layers as asked) laid out
// by parallel::Fsdp over the ranks of the job, with bf16 compute copies, f32 masters, AdamW moments and the gradient
// buffers each stage keeps resident; the bytes this rank's allocator holds afterwards (largest rank), next to the
// ZeRO paper's count for the same Ψ. Runs on the CPU (no step is taken, so any machine measures the layout).
// Usage: [mpirun -np N] bench_fsdp_states [--layers L]
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

// Bytes of model states this rank holds after laying the model out at `stage` (largest rank), and Ψ.
std::pair<double, double> measure(int stage, int64_t layers, parallel::Communicator& comm) {
  const size_t before = memory_stats(Device::cpu()).current;
  double held = 0, psi = 0;
  {
    ParameterRegistry params;
    layers::DecoderLM model(bench::qwen3_shape("0.6b", layers), params, {true});
    params.materialize(Device::cpu(), DType::BF16, 0);
    psi = double(params.count());
    parallel::Fsdp fsdp(params, model.units(), comm, parallel::zero_stage_from_int(stage));
    optim::AdamW adamw(fsdp.shards(), {});
    adamw.init_state();
    Tensor t = Tensor::full({1}, double(memory_stats(Device::cpu()).current - before), DType::F64);
    comm.all_reduce(t, parallel::ReduceOp::Max, "states");
    held = t.item();
  }
  return {held, psi};
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
    const auto [held, psi] = measure(stage, layers, *comm);
    // ZeRO-1 keeps the full f32 gradient for accumulation and reduce-scatters it into a shard of its own: 16Ψ/N.
    const double formula[] = {18 * psi, 6 * psi + 16 * psi / n, 2 * psi + 16 * psi / n, 18 * psi / n};
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f", held / formula[stage]);
    rows.push_back(
        {{"ZeRO-" + std::to_string(stage), std::to_string(comm->size()), gb(held), gb(formula[stage]), ratio}});
  }
  bench::print_table({"stage", "ranks", "measured GB (largest rank)", "formula GB", "measured / formula"}, rows);
  return 0;
}
