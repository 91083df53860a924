// Fused linear + cross-entropy forward + backward, bf16, by default at the Qwen3-0.6B LM head (N 16384 tokens, D 1024,
// V 151936; the shape is options): time, TFLOP/s (6 N D V for logits, dx and dW) and the peak extra memory against
// the [N, V] fp32 logits it avoids, at each chunk size; then the three GEMMs alone, the floor the fusion sits on.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/gemm.h"
#include "core/rng.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

int main(int argc, char** argv) {
  int64_t n = 16384, d = 1024, vocab = 151936;
  std::vector<int64_t> chunks{2048, 4096, 8192};
  CLI::App app{"bench_cross_entropy: fused linear + cross-entropy, forward + backward"};
  app.add_option("--tokens", n, "tokens (rows of x)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--dim", d, "hidden size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--vocab", vocab, "vocabulary (rows of W)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--chunks", chunks, "tokens per chunk, one or more")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  bench::parse_or_exit(app, argc, argv);
  if (!cuda::available()) {
    std::puts("bench_cross_entropy needs a CUDA device");
    return 0;
  }
  std::printf("# bench_cross_entropy — %s, %s\n\n", bench::device_name().c_str(), bench::today().c_str());
  const Device gpu = Device::cuda();
  const Tensor x = Tensor::empty({n, d}, DType::BF16, gpu), W = Tensor::empty({vocab, d}, DType::BF16, gpu);
  fill_normal(x, 1, 0.0, 1.0);
  fill_normal(W, 2, 0.0, 0.02);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(uniform01(3, i) * double(vocab)) % int32_t(vocab);
  const Tensor targets = Tensor::from_vector(t, {n}, DType::I32, gpu);
  const Tensor dW = Tensor::zeros({vocab, d}, DType::F32, gpu);
  const double flops = 6.0 * double(n) * double(d) * double(vocab);
  const double logits_gib = double(n) * double(vocab) * 4 / double(1 << 30);

  ops::set_gemm_autotune(true);  // as a trainer's warm-up step would; the first call per chunk size tunes its GEMMs
  std::vector<bench::Row> rows;
  for (int64_t chunk : chunks) {
    Tensor dx;
    auto step = [&] { ops::fused_linear_cross_entropy(x, W, targets, -100, 1.0 / double(n), &dx, dW, chunk); };
    step();
    cuda::synchronize();
    dx = Tensor();
    const size_t before = memory_stats(gpu).current;
    reset_peak_memory(gpu);
    step();
    cuda::synchronize();
    const double extra_gib = double(memory_stats(gpu).peak - before) / double(1 << 30);
    const double ms = bench::median_ms(step, 3, 10);
    rows.push_back(
        {{std::to_string(chunk), fmt::format("{:.2f}", ms), fmt::format("{:.0f}", flops / (ms * 1e-3) / 1e12),
          fmt::format("{:.2f}", extra_gib), fmt::format("{:.2f}", logits_gib)}});
  }
  // The three GEMMs alone, for each whole chunk of 4096 tokens (or of all of them if fewer).
  {
    const int64_t chunk = std::min<int64_t>(4096, n), whole = n / chunk;
    const double gemm_flops = 6.0 * double(whole * chunk) * double(d) * double(vocab);
    const Tensor logits = Tensor::empty({chunk, vocab}, DType::F32, gpu),
                 g = Tensor::empty({chunk, vocab}, DType::BF16, gpu);
    const Tensor dxc = Tensor::empty({chunk, d}, DType::BF16, gpu);
    fill_normal(g, 4, 0.0, 1e-4);
    const Tensor xc = x.slice(0, 0, chunk);
    const double ms = bench::median_ms(
        [&] {
          for (int64_t c = 0; c < whole; ++c) {
            ops::gemm(xc, false, W, true, logits);
            ops::gemm(g, false, W, false, dxc);
            ops::gemm(g, true, xc, false, dW, 1.0, 1.0);
          }
        },
        3, 10);
    rows.push_back({{fmt::format("GEMMs only ({} x {})", whole, chunk), fmt::format("{:.2f}", ms),
                     fmt::format("{:.0f}", gemm_flops / (ms * 1e-3) / 1e12), "-", fmt::format("{:.2f}", logits_gib)}});
  }
  bench::print_table({"chunk_tokens", "fwd+bwd ms", "TFLOP/s", "peak extra GiB", "[N,V] f32 logits GiB"}, rows);
  return 0;
}
