// Memory-bound row/elementwise ops in bf16: RMSNorm, SwiGLU and RoPE, forward and backward, by default at Llama/Qwen-7B
// sizes over 16,384 tokens (RMSNorm at hidden 4096 and Qwen3-0.6B's 1024; the shape is options). GB/s counts the
// minimum traffic (each input read once, each output written once) against the measured device-to-device copy
// bandwidth.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/swiglu.h"
#include "core/rng.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

Tensor random_gpu(const Shape& shape, DType dt, uint64_t key) {
  Tensor t = Tensor::empty(shape, dt, Device::cuda());
  fill_normal(t, key, 0.0, 1.0);
  return t;
}

struct Bench {
  double copy_gbps;
  std::vector<bench::Row> rows;

  void add(const std::string& op, const std::string& shape, double bytes, const std::function<void()>& fn) {
    const double ms = bench::median_ms(fn);
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    char t[32], g[32], pct[32];
    std::snprintf(t, sizeof t, "%.4f", ms);
    std::snprintf(g, sizeof g, "%.0f", gbps);
    std::snprintf(pct, sizeof pct, "%.0f%%", 100 * gbps / copy_gbps);
    rows.push_back({{op, shape, t, g, pct}});
  }
};

}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 16384, ffn = 11008, batch = 4, heads = 32, head_dim = 128;
  std::vector<int64_t> hiddens{4096, 1024};
  CLI::App app{"bench_rowops: RMSNorm, SwiGLU and RoPE, forward and backward, bf16"};
  app.add_option("--tokens", tokens, "tokens (B * T)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--hidden", hiddens, "RMSNorm: hidden sizes, one or more")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--ffn", ffn, "SwiGLU: intermediate size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "RoPE: sequences, dividing --tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "RoPE: heads")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--head-dim", head_dim, "RoPE: head dimension (even)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  bench::parse_or_exit(app, argc, argv);
  if (tokens % batch != 0 || head_dim % 2 != 0) {
    std::fprintf(stderr, "bench_rowops: --batch %ld must divide --tokens %ld and --head-dim %ld be even\n", long(batch),
                 long(tokens), long(head_dim));
    return 2;
  }
  if (!cuda::available()) {
    std::puts("bench_rowops: no CUDA device");
    return 0;
  }
  Bench b{bench::measure_copy_gbps(), {}};
  const double e = 2;  // bytes per bf16 element
  const DType bf = DType::BF16;

  // RMSNorm over the hidden size: a 7B model's, and Qwen3-0.6B's (rows of 2 KB, where a row's latency weighs more).
  for (const int64_t hidden : hiddens) {
    Tensor x = random_gpu({tokens, hidden}, bf, 1), w = random_gpu({hidden}, bf, 2);
    Tensor dy = random_gpu({tokens, hidden}, bf, 3), dw = Tensor::zeros({hidden}, DType::F32, Device::cuda());
    Tensor rstd;
    ops::rmsnorm(x, w, 1e-6, &rstd);
    const double act = double(tokens * hidden) * e, par = double(hidden) * e, stat = double(tokens) * 4;
    const std::string shape = "[" + std::to_string(tokens) + ", " + std::to_string(hidden) + "]";
    b.add("rmsnorm fwd", shape, 2 * act + par + stat, [&] { ops::rmsnorm(x, w, 1e-6, &rstd); });
    // dy, x, w, rstd in; dx out; dw read and written (f32).
    b.add("rmsnorm bwd (dx+dw)", shape, 3 * act + par + stat + 2.0 * hidden * 4,
          [&] { ops::rmsnorm_backward(dy, x, w, rstd, dw); });
  }
  {  // SwiGLU on the MLP's intermediate size.
    Tensor gate = random_gpu({tokens, ffn}, bf, 4), up = random_gpu({tokens, ffn}, bf, 5);
    Tensor dh = random_gpu({tokens, ffn}, bf, 6);
    const double act = double(tokens * ffn) * e;
    const std::string shape = "[" + std::to_string(tokens) + ", " + std::to_string(ffn) + "]";
    b.add("swiglu fwd", shape, 3 * act, [&] { ops::swiglu(gate, up); });
    Tensor dgate, dup;
    b.add("swiglu bwd", shape, 5 * act, [&] { ops::swiglu_backward(dh, gate, up, &dgate, &dup); });
  }
  {  // RoPE on q: [B, T, H, Dh] with B * T = 16384 tokens.
    const int64_t T = tokens / batch;
    Tensor x = random_gpu({batch, T, heads, head_dim}, bf, 7);
    std::vector<int32_t> p(static_cast<size_t>(tokens));
    for (int64_t i = 0; i < tokens; ++i) p[size_t(i)] = int32_t(i % T);
    Tensor pos = Tensor::from_vector(p, {batch, T}, DType::I32, Device::cuda());
    Tensor inv_freq = ops::rope_inv_freq(head_dim, 1e6).to(Device::cuda());
    const double bytes = 2.0 * double(x.numel()) * e + double(tokens) * 4 + double(head_dim / 2) * 4;
    const std::string shape = "[" + std::to_string(batch) + ", " + std::to_string(T) + ", " + std::to_string(heads) +
                              ", " + std::to_string(head_dim) + "]";
    b.add("rope fwd", shape, bytes, [&] { ops::rope(x, pos, inv_freq); });
    b.add("rope bwd", shape, bytes, [&] { ops::rope_backward(x, pos, inv_freq); });
  }

  std::printf("bench_rowops: %s, %s, bf16, copy bandwidth %.0f GB/s\n", bench::device_name().c_str(),
              bench::today().c_str(), b.copy_gbps);
  bench::print_table({"op", "shape", "median ms", "GB/s", "% of copy"}, b.rows);
  return 0;
}
