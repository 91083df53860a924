// A distributed training step on every rank of the job: a Qwen3-shaped model (optionally a hybrid, optionally with
// sequence parallelism) with bf16 compute, fp32 masters, AdamW and block recomputation, laid out by FSDP at each ZeRO
// stage asked. One process (NCCL at world size 1), one GPU per rank (NCCL), or ranks sharing a GPU (MPI with host
// staging). Prints step time, tokens/s per GPU, MFU and the largest rank's peak memory, next to the ZeRO paper's
// model-state formula; tools/bench/fsdp2_peer.py measures PyTorch FSDP2 on the same shapes.
// Usage: [mpirun -np N] bench_fsdp [--shape 0.6b|1.7b|4b|8b] [--layers L] [--pattern '*-GDN'] [--modes
// unsharded,0,1,2,3]
//          [--batch B] [--seq T] [--steps S] [--sp P] [--ssm-mode p2p|usp|a2a] [--state-passing log-depth|serial]
//          [--attention zigzag-ring|ring|all-gather|ulysses] [--device cuda|cpu] [--gka-one-bf16]
// --batch is per data-parallel rank; the pattern repeats to the layer count ('*-GDN' is a 50% GDN hybrid); with
// --sp P the world is (N / P) data-parallel x P sequence-parallel ranks and each rank holds T / P tokens of a row.
// --device cpu is a smoke run of the same code (f32, wall clock, no MFU). --gka-one-bf16 runs GKA layers without
// their precise mode (gka.precise_iterate: false).
#include <cstdio>
#include <cstdlib>

#include "core/cuda_runtime.h"
#include "core/ops/gemm.h"
#include "core/rng.h"
#include "core/sequence_layout.h"
#include "layers/decoder_lm.h"
#include "optim/adamw.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/process_grid.h"
#include "parallel/comm/world_communicator.h"
#include "parallel/fsdp/fsdp.h"
#include "parallel/sp/sequence_parallel.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

struct Options {
  std::vector<std::string> modes{"unsharded", "0", "3"};
  std::string shape = "0.6b", pattern, device = "cuda";
  int64_t batch = 4, seq = 4096, layers = 0, steps = 6;
  int sp = 1;
  std::string ssm_mode = "p2p", state_passing = "log-depth", attention = "zigzag-ring";
  bool gka_one_bf16 = false;
};

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_fsdp: a distributed training step at each ZeRO stage asked, on every rank"};
  app.add_option("--modes", o.modes, "unsharded and ZeRO stages 0-3")->delimiter(',')->capture_default_str();
  app.add_option("--shape", o.shape, "a Qwen3 shape: 0.6b, 1.7b, 4b, 8b")->capture_default_str();
  app.add_option("--layers", o.layers, "layers (0: the shape's)")->capture_default_str();
  app.add_option("--pattern", o.pattern, "a hybrid_override_pattern (empty: the Transformer)");
  app.add_option("--batch", o.batch, "sequences per rank")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seq", o.seq, "tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "steps (the first two untimed)")->capture_default_str();
  app.add_option("--sp", o.sp, "sequence-parallel ranks")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--ssm-mode", o.ssm_mode, "p2p, usp or a2a")->capture_default_str();
  app.add_option("--state-passing", o.state_passing, "log-depth or serial")->capture_default_str();
  app.add_option("--attention", o.attention, "zigzag-ring, ring, all-gather or ulysses")->capture_default_str();
  app.add_option("--device", o.device, "cpu or cuda")->capture_default_str();
  app.add_flag("--gka-one-bf16", o.gka_one_bf16, "GKA without its precise mode (gka.precise_iterate: false)");
  bench::parse_or_exit(app, argc, argv);
  return o;
}

ModelConfig model_config(const Options& o) {
  ModelConfig c = bench::qwen3_shape(o.shape, o.layers);
  bench::apply_pattern(c, o.pattern);
  c.gka.precise_iterate = !o.gka_one_bf16;
  return c;
}

parallel::SequenceParallelOptions sp_options(const Options& o) {
  parallel::SequenceParallelOptions s;
  s.layout = o.attention == "zigzag-ring" ? SequenceLayout::ZigZag : SequenceLayout::Contiguous;
  s.attention = o.attention == "zigzag-ring" ? parallel::AttentionSequenceMode::Ring
                                             : parallel::parse_attention_sequence_mode(o.attention);
  s.recurrent = parallel::parse_recurrent_sequence_mode(o.ssm_mode);
  s.state_passing = parallel::parse_state_passing(o.state_passing);
  return s;
}

double max_over_ranks(parallel::Communicator& host, double v) {
  Tensor t = Tensor::full({1}, v, DType::F64);
  host.all_reduce(t, parallel::ReduceOp::Max, "bench");
  return t.item();
}

std::string sp_label(const Options& o) {
  if (o.sp == 1) return "";
  return fmt::format(", sp {} ({}{}, {})", o.sp, o.ssm_mode, o.ssm_mode == "p2p" ? " " + o.state_passing : "",
                     o.attention);
}

bench::Row measure(const std::string& mode, const Options& o, Device device, parallel::Communicator& comm,
                   parallel::Communicator& host) {
  const ModelConfig config = model_config(o);
  const bool unsharded = mode == "unsharded";
  PRIMER_CHECK(!unsharded || comm.size() == 1, "bench_fsdp: mode unsharded runs on one rank (got {})", comm.size());
  std::unique_ptr<parallel::ProcessGrid> grid;
  std::unique_ptr<parallel::SequenceParallel> sequence;
  const parallel::SequenceParallelOptions spo = sp_options(o);
  if (o.sp > 1) {
    grid = std::make_unique<parallel::ProcessGrid>(comm, o.sp);
    sequence = std::make_unique<parallel::SequenceParallel>(grid->sp(), spo);
  }
  const int dp_rank = grid ? grid->dp_rank() : comm.rank(), dp_size = grid ? grid->dp_size() : comm.size();
  const int sp_rank = grid ? grid->sp_rank() : 0;

  ParameterRegistry params;
  layers::DecoderLM model(config, params, {true});
  params.materialize(device, device.is_cuda() ? DType::BF16 : DType::F32, 0);
  std::unique_ptr<parallel::Fsdp> fsdp;
  ParameterRegistry* optimized = &params;
  if (!unsharded) {  // FSDP over the whole world, as the trainer lays it out
    fsdp = std::make_unique<parallel::Fsdp>(params, model.units(), comm,
                                            parallel::zero_stage_from_int(std::atoi(mode.c_str())));
    model.set_unit_hooks(fsdp.get());
    optimized = &fsdp->shards();
  }
  model.set_sequence_exchange(sequence.get());
  optim::AdamW adamw(*optimized, {});
  if (fsdp && fsdp->stage() != parallel::ZeroStage::Replicated && comm.size() > 1)
    adamw.set_grad_norm_reduction([&comm](const Tensor& s) { comm.all_reduce(s, parallel::ReduceOp::Sum, "norm"); });

  // This rank's part of its data-parallel rows: tokens keyed by (row, global position), so the sequence-parallel
  // ranks of a row hold pieces of one sequence, with their global positions.
  const int64_t T_local = o.seq / o.sp;
  std::vector<int32_t> ids, pos;
  for (int64_t b = 0; b < o.batch; ++b)
    for (const auto& [begin, end] : sequence_part(o.seq, o.sp, sp_rank, spo.layout))
      for (int64_t t = begin; t < end; ++t) {
        ids.push_back(int32_t(uniform01(7 + uint64_t(dp_rank), uint64_t(b * o.seq + t)) * double(config.vocab_size)));
        pos.push_back(int32_t(t));
      }
  const Tensor tokens = Tensor::from_vector(ids, {o.batch, T_local}, DType::I32, device);
  const Tensor positions = o.sp > 1 ? Tensor::from_vector(pos, {o.batch, T_local}, DType::I32, device) : Tensor();
  const double scale = 1.0 / double(o.batch * o.seq * dp_size);
  auto step = [&] {
    if (fsdp) {
      fsdp->zero_grads();
      fsdp->begin_micro_batch(true);
    } else {
      params.zero_grads();
    }
    ag::backward(model.loss(tokens, tokens, scale, positions));
    if (fsdp) fsdp->finish_backward();
    adamw.step(1e-4);
    if (fsdp) fsdp->after_optimizer_step();
  };
  if (device.is_cuda()) ops::set_gemm_autotune(true);  // the first step picks each GEMM's fastest algorithm
  step();
  if (device.is_cuda()) ops::set_gemm_autotune(false);
  reset_peak_memory(device);
  const double ms = max_over_ranks(host, bench::median_ms_on(device, step, device.is_cuda() ? 1 : 0, int(o.steps)));
  const double peak = max_over_ranks(host, double(memory_stats(device).peak));
  const double tok_s_per_gpu = double(o.batch * T_local) / (ms * 1e-3);
  const double mfu = device.is_cuda() ? tok_s_per_gpu * model.flops_per_token(o.seq) / cuda::peak_bf16_flops() : 0;
  const std::string run = (unsharded ? "no FSDP (one registry)" : "ZeRO-" + mode) + sp_label(o);
  const std::string model_name = "Qwen3-" + o.shape + (o.pattern.empty() ? "" : " '" + o.pattern + "'") +
                                 (o.layers > 0 ? fmt::format(" ({} layers)", config.num_hidden_layers) : "") +
                                 (o.gka_one_bf16 ? ", GKA one bf16" : "");
  return {{run, model_name, fmt::format("{} ({})", comm.size(), comm.backend_name()),
           fmt::format("{}x{}", o.batch, o.seq), fmt::format("{:.1f}", ms), fmt::format("{:.1f}K", tok_s_per_gpu / 1e3),
           device.is_cuda() ? fmt::format("{:.1f}%", 100 * mfu) : "-", fmt::format("{:.2f} GB", peak / 1e9)}};
}

// Model states per GPU (GB = 1e9 B) by the ZeRO paper's count with primer's fp32 gradients: bf16 weights 2Ψ, fp32
// gradients 4Ψ, fp32 master + moments 12Ψ; ZeRO-1 shards the 12Ψ (and keeps a gradient shard of 4Ψ/N beside the
// full gradient), ZeRO-2 also the gradients, ZeRO-3 everything.
void print_formula(int world) {
  std::printf("\nmodel states per rank (GB), bf16 weights + f32 gradients + f32 master and moments, N = %d:\n", world);
  std::vector<bench::Row> rows;
  auto gb = [](double bytes) { return fmt::format("{:.1f}", bytes / 1e9); };
  const double n = world;
  for (const auto& [name, psi] : {std::pair{"Qwen3-0.6B", 0.6e9}, std::pair{"Qwen3-1.7B", 1.7e9},
                                  std::pair{"Qwen3-4B", 4.0e9}, std::pair{"Qwen3-8B", 8.2e9}, std::pair{"32B", 32e9}})
    rows.push_back({{name, gb(18 * psi), gb(6 * psi + 16 * psi / n), gb(2 * psi + 16 * psi / n), gb(18 * psi / n)}});
  bench::print_table({"model", "ZeRO-0", "ZeRO-1", "ZeRO-2", "ZeRO-3"}, rows);
}

}  // namespace

int main(int argc, char** argv) {
  parallel::WorldScope world(argc, argv);
  const Options o = parse(argc, argv);
  Device device = Device::cpu();
  if (o.device == "cuda") {
    const int gpu = parallel::select_local_gpu();
    if (gpu < 0) {
      std::puts("bench_fsdp: no CUDA device (use --device cpu)");
      return 0;
    }
    device = Device::cuda(gpu);
  }
  const auto comm = parallel::make_world_communicator(device, {.timeout_seconds = 600});
  const auto host = parallel::make_world_communicator(Device::cpu(), {.timeout_seconds = 600});
  const ModelConfig config = model_config(o);
  std::printf("# bench_fsdp — Qwen3-%s shape%s (%lld layers), %s compute, fp32 master + AdamW, recompute — %s, %s\n",
              o.shape.c_str(), o.pattern.empty() ? "" : (" as '" + o.pattern + "'").c_str(),
              static_cast<long long>(config.num_hidden_layers), device.is_cuda() ? "bf16" : "f32 (CPU)",
              device.is_cuda() ? bench::device_name().c_str() : "CPU", bench::today().c_str());
  std::vector<bench::Row> rows;
  for (const std::string& mode : o.modes) {
    std::printf("measuring %s on %d rank(s) ...\n", mode.c_str(), comm->size());
    std::fflush(stdout);
    rows.push_back(measure(mode, o, device, *comm, *host));
  }
  bench::print_table(
      {"run", "model", "GPUs", "B x T per data rank", "step ms", "tokens/s per GPU", "MFU", "peak memory (max rank)"},
      rows);
  print_formula(comm->size());
  return 0;
}
