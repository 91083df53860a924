// One training step of a Qwen3-0.6B-shaped model (28 layers, hidden 1024, 16 q / 8 kv heads, head_dim 128,
// FFN 3072, vocab 151936, tied embeddings) at B=4, T=4096 on one GPU: forward, fused-CE backward, AdamW with
// fp32 masters. Prints tokens/s, MFU and peak memory, with and without block recomputation.
// The peer (PyTorch + transformers, same shape) is tools/bench/train_step_peer.py.
#include <cstdio>

#include "core/cuda_runtime.h"
#include "core/ops/gemm.h"
#include "core/rng.h"
#include "layers/decoder_lm.h"
#include "optim/adamw.h"
#include "recipes/trainer.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

bench::Row measure(bool recompute, int64_t B, int64_t T) {
  const ModelConfig config = bench::qwen3_shape("0.6b");
  ParameterRegistry params;
  layers::DecoderLM model(config, params, {recompute});
  params.materialize(Device::cuda(), DType::BF16, 0);
  optim::AdamW adamw(params, {});
  const Tensor ids = Tensor::empty({B, T}, DType::I32, Device::cuda());
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
  const double tok_s = double(B * T) / (ms * 1e-3);
  const double mfu = tok_s * model.flops_per_token(T) / cuda::peak_bf16_flops();
  char a[32], b[32], c[32], d[32];
  std::snprintf(a, sizeof a, "%.1f", ms);
  std::snprintf(b, sizeof b, "%.1fK", tok_s / 1e3);
  std::snprintf(c, sizeof c, "%.1f%%", 100 * mfu);
  std::snprintf(d, sizeof d, "%.1f GB", double(memory_stats(Device::cuda()).peak) / 1e9);
  return {{recompute ? "primer (recompute blocks)" : "primer (keep activations)",
           std::to_string(B) + "x" + std::to_string(T), a, b, c, d}};
}

}  // namespace

int main() {
  if (!cuda::available()) {
    std::puts("bench_train_step: no CUDA device");
    return 0;
  }
  std::printf("# bench_train_step — Qwen3-0.6B shape, bf16 compute, fp32 master + AdamW — %s, %s\n",
              bench::device_name().c_str(), bench::today().c_str());
  std::vector<bench::Row> rows;
  for (bool recompute : {false, true}) rows.push_back(measure(recompute, 4, 4096));
  bench::print_table({"run", "B x T", "step ms", "tokens/s", "MFU", "peak memory"}, rows);
  return 0;
}
