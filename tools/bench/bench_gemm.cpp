// GEMM throughput: the ceilings (a large bf16 GEMM through ops::gemm, device copy bandwidth), then the GEMMs of a
// Qwen3-shaped training step (--shape, by default 0.6b, at --tokens 16384), each against the best of every algorithm
// cuBLASLt's heuristic proposes.
#include <cstdio>
#include <string>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/gemm.h"
#include "core/ops/gemm.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

#ifdef PRIMER_WITH_CUDA
namespace {

Tensor random(const Shape& shape, DType dtype, uint64_t key, double std) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda());
  fill_normal(t, key, 0.0, std);  // random data: constant inputs understate tensor-core power and flatter clocks
  return t;
}

double tflops(double flops, double ms) { return flops / (ms * 1e-3) / 1e12; }

struct Problem {
  std::string name;
  Tensor A, B, C;
  bool trans_a, trans_b;
  double beta;
  double flops() const {
    const int64_t m = trans_a ? A.size(1) : A.size(0), k = trans_a ? A.size(0) : A.size(1);
    return 2.0 * double(m) * double(C.size(1)) * double(k);
  }
};

// Fastest of the heuristic's candidates on exactly the call ops::gemm makes (candidates that fail are skipped).
std::pair<double, int> best_candidate(const Problem& p) {
  const ops::GemmArgs g = ops::gemm_args(p.A, p.trans_a, p.B, p.trans_b, p.C, 1.0, p.beta);
  const int count = ops::cuda_ops::gemm_algorithm_count(g);
  double best = 1e30;
  for (int i = 0; i < count; ++i) {
    if (!ops::cuda_ops::gemm_with_algorithm(g, i)) continue;
    best = std::min(best, bench::median_ms([&] { ops::cuda_ops::gemm_with_algorithm(g, i); }, 2, 10));
  }
  return {best, count};
}

// The ceilings, then each of the step's GEMMs, as one table.
void run(const std::string& shape, const ModelConfig& c, int64_t tokens) {
  std::printf("# bench_gemm — Qwen3-%s shape, %ld tokens — %s, %s\n\n", shape.c_str(), long(tokens),
              bench::device_name().c_str(), bench::today().c_str());
  const Device gpu = Device::cuda();
  ops::set_gemm_autotune(true);  // as a trainer's warm-up step would; each layout's first call below tunes it
  double ceiling = 0;
  {
    const int64_t s = 8192;
    const Tensor A = random({s, s}, DType::BF16, 1, 1.0), B = random({s, s}, DType::BF16, 2, 1.0);
    const Tensor C = Tensor::empty({s, s}, DType::BF16, gpu);
    ceiling = tflops(2.0 * s * s * s, bench::median_ms([&] { ops::gemm(A, false, B, false, C); }));
  }
  const double copy = bench::measure_copy_gbps();
  std::printf("ceilings: bf16 GEMM 8192^3 via ops::gemm %.1f TFLOP/s; device copy %.0f GB/s\n\n", ceiling, copy);

  // [out, in] weights (0.6b: hidden 1024, 16 query heads and 8 KV heads of 128, FFN 3072, vocabulary 151936).
  const int64_t d = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const int64_t ffn = c.intermediate_size;
  const std::pair<std::string, std::pair<int64_t, int64_t>> layers[] = {
      {"q_proj", {q, d}},         {"k/v_proj", {kv, d}},   {"o_proj", {d, q}},
      {"gate/up_proj", {ffn, d}}, {"down_proj", {d, ffn}}, {"lm_head", {c.vocab_size, d}}};
  std::vector<bench::Row> rows;
  for (const auto& [name, dims] : layers) {
    const auto [out, in] = dims;
    const Tensor x = random({tokens, in}, DType::BF16, 3, 1.0), W = random({out, in}, DType::BF16, 4, 0.02);
    const Tensor y = random({tokens, out}, DType::BF16, 5, 1.0), dx = Tensor::empty({tokens, in}, DType::BF16, gpu);
    const Tensor dW = Tensor::zeros({out, in}, DType::F32, gpu);
    const Problem problems[] = {{name + " fwd x@W^T", x, W, y, false, true, 0.0},
                                {name + " dgrad dy@W", y, W, dx, false, false, 0.0},
                                {name + " wgrad dW+=dy^T@x (f32)", y, x, dW, true, false, 1.0}};
    for (const Problem& p : problems) {
      const double ms = bench::median_ms([&] { ops::gemm(p.A, p.trans_a, p.B, p.trans_b, p.C, 1.0, p.beta); });
      const ops::GemmArgs g = ops::gemm_args(p.A, p.trans_a, p.B, p.trans_b, p.C, 1.0, p.beta);
      const double first_ms = bench::median_ms([&] { ops::cuda_ops::gemm_with_algorithm(g, 0); });
      const auto [best_ms, count] = best_candidate(p);
      const int64_t m = p.C.size(0), n = p.C.size(1), k = p.trans_a ? p.A.size(0) : p.A.size(1);
      rows.push_back(
          {{p.name, fmt::format("{}x{}x{}", m, n, k), fmt::format("{:.3f}", first_ms), fmt::format("{:.3f}", ms),
            fmt::format("{:.0f}", tflops(p.flops(), ms)), fmt::format("{:.0f}%", 100 * tflops(p.flops(), ms) / ceiling),
            fmt::format("{:.3f}", best_ms), std::to_string(count), fmt::format("{:.2f}", ms / best_ms)}});
    }
  }
  bench::print_table({"GEMM (" + std::to_string(tokens) + " tokens)", "MxNxK", "heuristic #0 ms", "ours (tuned) ms",
                      "TFLOP/s", "% ceiling", "best-of-heuristics ms", "candidates", "ours/best"},
                     rows);
}

}  // namespace
#endif

int main(int argc, char** argv) {
  std::string shape = "0.6b";
  int64_t tokens = 16384;
  CLI::App app{"bench_gemm: the GEMM ceiling, then a Qwen3-shaped training step's GEMMs"};
  app.add_option("--shape", shape, "Qwen3 shape")
      ->capture_default_str()
      ->check(CLI::IsMember({"0.6b", "1.7b", "4b", "8b"}));
  app.add_option("--tokens", tokens, "tokens per step (B * T)")->capture_default_str()->check(CLI::PositiveNumber);
  bench::parse_or_exit(app, argc, argv);
  const ModelConfig c = bench::qwen3_shape(shape);
#ifdef PRIMER_WITH_CUDA
  if (cuda::available()) {
    run(shape, c, tokens);
    return 0;
  }
#endif
  std::puts("bench_gemm: no CUDA device");
  return 0;
}
