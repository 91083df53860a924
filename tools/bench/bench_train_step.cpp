// One training step of a Qwen3-shaped model (by default the 0.6B shape: 28 layers, hidden 1024, 16 q / 8 kv heads,
// head_dim 128, FFN 3072, vocab 151936, tied embeddings) at B=4, T=4096 on one GPU: forward, fused-CE backward, AdamW
// with fp32 masters. Prints tokens/s, MFU and peak memory with activations kept and with block recomputation
// (selective, the recipes' default; or whole blocks: --recompute off|on|full|both|all).
// The peer (PyTorch + transformers, same shape) is tools/bench/train_step_peer.py.
// --profile runs one more step of each mode between cudaProfilerStart/Stop, for
// `ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw` (tools/bench/step-kernels.sh).
// --timeline records one more step of each mode with CUPTI and prints when the GPU sat idle, and around what.
#include <algorithm>
#include <cstdio>

#include "core/cuda_runtime.h"
#include "core/ops/gemm.h"
#include "core/rng.h"
#include "layers/decoder_lm.h"
#include "optim/adamw.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"
#include "tools/bench/common/gpu_timeline.h"

using namespace primer;

namespace {

struct Options {
  std::string shape = "0.6b", pattern, recompute = "both";
  int64_t batch = 4, seq = 4096;
  bool profile = false, phases = false, timeline = false;
};

// How a step treats the blocks' activations: kept, recomputed but for attention's, the SSM cores' and the output
// projections' results (the recipes' default), or recomputed whole.
enum class Recompute { Off, Selective, Full };

bench::Row measure(const Options& o, Recompute mode) {
  ModelConfig config = bench::qwen3_shape(o.shape);
  bench::apply_pattern(config, o.pattern);
  ParameterRegistry params;
  const bool recompute = mode != Recompute::Off;
  layers::DecoderLM model(config, params,
                          {.recompute = recompute, .selective_recompute = mode == Recompute::Selective});
  const char* mode_name = mode == Recompute::Off         ? "activations kept"
                          : mode == Recompute::Selective ? "blocks recomputed, selectively"
                                                         : "blocks recomputed whole";
  params.materialize(Device::cuda(), DType::BF16, 0);
  optim::AdamW adamw(params, {});
  const int64_t B = o.batch, T = o.seq;
  std::vector<int32_t> host(size_t(B * T));
  for (size_t i = 0; i < host.size(); ++i) host[i] = int32_t(uniform01(7, i) * double(config.vocab_size));
  const Tensor tokens = Tensor::from_vector(host, {B, T}, DType::I32, Device::cuda());
  const double scale = 1.0 / double(B * T);
  auto step = [&] {
    params.zero_grads();
    ag::backward(model.loss(tokens, tokens, scale));
    adamw.step(1e-4);
  };
  ops::set_gemm_autotune(true);  // the first step picks each GEMM's fastest algorithm
  step();
  ops::set_gemm_autotune(false);
  reset_peak_memory(Device::cuda());
  const double ms = bench::median_ms(step, 2, 8);
  if (o.profile) bench::profiled_once_ms(step);
  if (o.timeline) {
    std::printf("\none step, %s, under CUPTI (step time above: %.1f ms):\n", mode_name, ms);
    bench::print_timeline(bench::gpu_timeline(step));
  }
  if (o.phases) {
    ag::Var loss;
    const std::vector<bench::PhaseTime> t =
        bench::phase_times({[&] {
                              params.zero_grads();
                              loss = model.loss(tokens, tokens, scale);
                            },
                            [&] { ag::backward(loss); }, [&] { adamw.step(1e-4); }});
    const char* names[] = {"forward", "backward", "optimizer"};
    for (size_t i = 0; i < t.size(); ++i)
      std::printf("%s, %s: %.1f ms GPU, %.1f ms host to enqueue, of which %.1f ms in %.1f waits on the stream\n",
                  mode_name, names[i], t[i].gpu_ms, t[i].host_ms, t[i].sync_wait_ms, t[i].syncs);
  }
  const double tok_s = double(B * T) / (ms * 1e-3);
  const double mfu = tok_s * model.flops_per_token(T) / cuda::peak_bf16_flops();
  return {{std::string("primer (") + mode_name + ")", std::to_string(B) + "x" + std::to_string(T), bench::fixed(ms, 1),
           bench::fixed(tok_s / 1e3, 1) + "K", bench::fixed(100 * mfu, 1) + "%",
           bench::fixed(double(memory_stats(Device::cuda()).peak) / 1e9, 1) + " GB"}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_train_step: one training step of a Qwen3-shaped model on one GPU"};
  app.add_option("--shape", o.shape, "Qwen3 shape: 0.6b, 1.7b, 4b, 8b")->capture_default_str();
  app.add_option("--pattern", o.pattern, "hybrid_override_pattern repeated over the layers ('*-GDN': 50% GDN)");
  app.add_option("--batch", o.batch, "sequences per step")->capture_default_str();
  app.add_option("--seq", o.seq, "tokens per sequence")->capture_default_str();
  app.add_option("--recompute", o.recompute,
                 "block recomputation: off (activations kept), on (attention's, the SSM cores' and the output "
                 "projections' results kept: the recipes' default), full (whole blocks), both (off and on), all")
      ->check(CLI::IsMember({"both", "all", "on", "full", "off"}))
      ->capture_default_str();
  app.add_flag("--profile", o.profile, "one more step of each mode between cudaProfilerStart/Stop (for ncu)");
  app.add_flag("--phases", o.phases, "GPU and host enqueue time of forward, backward and optimizer, per mode");
  app.add_flag("--timeline", o.timeline,
               "one more step of each mode under CUPTI: GPU busy and idle time, longest gaps");
  bench::parse_or_exit(app, argc, argv);
  if (!cuda::available()) {
    std::puts("bench_train_step: no CUDA device");
    return 0;
  }
  std::printf("# bench_train_step — Qwen3-%s shape%s, bf16 compute, fp32 master + AdamW — %s, %s\n", o.shape.c_str(),
              o.pattern.empty() ? "" : (", pattern " + o.pattern).c_str(), bench::device_name().c_str(),
              bench::today().c_str());
  std::vector<bench::Row> rows;
  const std::pair<Recompute, std::vector<std::string>> modes[] = {{Recompute::Off, {"off", "both", "all"}},
                                                                  {Recompute::Selective, {"on", "both", "all"}},
                                                                  {Recompute::Full, {"full", "all"}}};
  for (const auto& [mode, names] : modes)
    if (std::find(names.begin(), names.end(), o.recompute) != names.end()) rows.push_back(measure(o, mode));
  bench::print_table({"run", "B x T", "step ms", "tokens/s", "MFU", "peak memory"}, rows);
  return 0;
}
