// The FSDP machinery on a Qwen3-0.6B-shaped training step (28 layers, hidden 1024, vocab 151936, tied embeddings;
// bf16 compute, fp32 masters, AdamW, block recomputation), on every rank of the job: one process (NCCL at world size
// 1) or several ranks sharing the GPU (MPI with host staging). Prints step time, tokens/s per rank and the largest
// rank's peak memory, next to the ZeRO paper's model-state formula for 0.6B, 8B and 32B parameters.
// Usage: [mpirun -np N] bench_fsdp [--modes unsharded,0,1,2,3] [--batch B] [--seq T] [--layers L] [--steps S]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/cuda_runtime.h"
#include "core/ops/gemm.h"
#include "core/rng.h"
#include "layers/decoder_lm.h"
#include "optim/adamw.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/world_communicator.h"
#include "parallel/fsdp/fsdp.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

struct Options {
  std::vector<std::string> modes{"unsharded", "0", "3"};
  int64_t batch = 4, seq = 4096, layers = 28, steps = 6;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--modes") {
      o.modes.clear();
      std::stringstream in(value);
      for (std::string m; std::getline(in, m, ',');) o.modes.push_back(m);
    } else if (key == "--batch") o.batch = std::atoll(value.c_str());
    else if (key == "--seq") o.seq = std::atoll(value.c_str());
    else if (key == "--layers") o.layers = std::atoll(value.c_str());
    else if (key == "--steps") o.steps = std::atoll(value.c_str());
    else { std::fprintf(stderr, "bench_fsdp: unknown option %s\n", key.c_str()); std::exit(2); }
  }
  return o;
}

double max_over_ranks(parallel::Communicator& host, double v) {
  Tensor t = Tensor::full({1}, v, DType::F64);
  host.all_reduce(t, parallel::ReduceOp::Max, "bench");
  return t.item();
}

bench::Row measure(const std::string& mode, const Options& o, parallel::Communicator& comm,
                   parallel::Communicator& host) {
  const Device device = Device::cuda(cuda::current_device());
  const ModelConfig config = bench::qwen3_0_6b(o.layers);
  ParameterRegistry params;
  layers::DecoderLM model(config, params, {true});
  params.materialize(device, DType::BF16, 0);
  std::unique_ptr<parallel::Fsdp> fsdp;
  ParameterRegistry* optimized = &params;
  if (mode != "unsharded") {
    const parallel::ZeroStage stage = parallel::zero_stage_from_int(std::atoi(mode.c_str()));
    fsdp = std::make_unique<parallel::Fsdp>(params, model.units(), comm, stage);
    model.set_unit_hooks(fsdp.get());
    optimized = &fsdp->shards();
  }
  optim::AdamW adamw(*optimized, {});
  if (fsdp && fsdp->stage() != parallel::ZeroStage::Replicated && comm.size() > 1)
    adamw.set_grad_norm_reduction([&comm](const Tensor& s) { comm.all_reduce(s, parallel::ReduceOp::Sum, "norm"); });
  std::vector<int32_t> ids(size_t(o.batch * o.seq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(uniform01(7 + uint64_t(comm.rank()), i) * double(config.vocab_size));
  const Tensor tokens = Tensor::from_vector(ids, {o.batch, o.seq}, DType::I32, device);
  const double scale = 1.0 / double(o.batch * o.seq * comm.size());
  auto step = [&] {
    if (fsdp) {
      fsdp->zero_grads();
      fsdp->begin_micro_batch(true);
    } else {
      params.zero_grads();
    }
    ag::backward(model.loss(tokens, tokens, scale));
    if (fsdp) fsdp->finish_backward();
    adamw.step(1e-4);
    if (fsdp) fsdp->after_optimizer_step();
  };
  ops::set_gemm_autotune(true);  // the first step picks each GEMM's fastest algorithm
  step();
  ops::set_gemm_autotune(false);
  reset_peak_memory(device);
  const double ms = max_over_ranks(host, bench::median_ms(step, 1, int(o.steps)));
  const double peak = max_over_ranks(host, double(memory_stats(device).peak));
  const double tok_s = double(o.batch * o.seq) / (ms * 1e-3);
  const double mfu = tok_s * model.flops_per_token(o.seq) / cuda::peak_bf16_flops();
  char a[32], b[32], c[32], d[32];
  std::snprintf(a, sizeof a, "%.1f", ms);
  std::snprintf(b, sizeof b, "%.1fK", tok_s / 1e3);
  std::snprintf(c, sizeof c, "%.1f%%", 100 * mfu);
  std::snprintf(d, sizeof d, "%.2f GB", peak / 1e9);
  const std::string label = mode == "unsharded" ? "no FSDP (one registry)" : "ZeRO-" + mode;
  return {{label, std::to_string(comm.size()) + " (" + comm.backend_name() + ")",
           std::to_string(o.batch) + "x" + std::to_string(o.seq), a, b, c, d}};
}

// Model states per GPU (GB = 1e9 B) by the ZeRO paper's count with primer's fp32 gradients: bf16 weights 2Ψ, fp32
// gradients 4Ψ, fp32 master + moments 12Ψ; ZeRO-1 shards the 12Ψ (and keeps a gradient shard of 4Ψ/N beside the
// full gradient), ZeRO-2 also the gradients, ZeRO-3 everything.
void print_formula(int world) {
  std::printf("\nmodel states per rank (GB), bf16 weights + f32 gradients + f32 master and moments, N = %d:\n", world);
  std::vector<bench::Row> rows;
  auto gb = [](double bytes) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f", bytes / 1e9);
    return std::string(s);
  };
  const double n = world;
  for (const auto& [name, psi] : {std::pair{"Qwen3-0.6B", 0.6e9}, std::pair{"8B", 8e9}, std::pair{"32B", 32e9}})
    rows.push_back({{name, gb(18 * psi), gb(6 * psi + 16 * psi / n), gb(2 * psi + 16 * psi / n), gb(18 * psi / n)}});
  bench::print_table({"model", "ZeRO-0", "ZeRO-1", "ZeRO-2", "ZeRO-3"}, rows);
}

}  // namespace

int main(int argc, char** argv) {
  parallel::WorldScope world(argc, argv);
  const Options o = parse(argc, argv);
  const int gpu = parallel::select_local_gpu();
  if (gpu < 0) {
    std::puts("bench_fsdp: no CUDA device");
    return 0;
  }
  const auto comm = parallel::make_world_communicator(Device::cuda(gpu), {.timeout_seconds = 600});
  const auto host = parallel::make_world_communicator(Device::cpu(), {.timeout_seconds = 600});
  std::printf("# bench_fsdp — Qwen3-0.6B shape (%lld layers), bf16 compute, fp32 master + AdamW, recompute — %s, %s\n",
              static_cast<long long>(o.layers), bench::device_name().c_str(), bench::today().c_str());
  std::vector<bench::Row> rows;
  for (const std::string& mode : o.modes) {
    std::printf("measuring %s on %d rank(s) ...\n", mode.c_str(), comm->size());
    std::fflush(stdout);
    rows.push_back(measure(mode, o, *comm, *host));
  }
  bench::print_table({"run", "ranks", "B x T per rank", "step ms", "tokens/s per rank", "MFU", "peak memory (max rank)"},
                     rows);
  print_formula(comm->size());
  return 0;
}
