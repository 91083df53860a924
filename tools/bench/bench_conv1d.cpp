// Causal depthwise conv1d (bf16, bias, SiLU) and embedding gather/scatter-add: time and bandwidth against the
// device-to-device copy ceiling. Bytes counted are the minimum each op must move. The shapes are options; the defaults
// are docs/perf.md's (conv: B 4, T 4096, C 4096 and 6144, K 4; embedding: Qwen3's vocabulary, D 1024, 16,384 ids).
#include <fmt/format.h>

#include <cstdio>
#include <set>
#include <string>

#include "core/cuda_runtime.h"
#include "core/ops/conv1d.h"
#include "core/ops/embedding.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

bench::Row row(const std::string& op, const std::string& shape, double ms, double bytes, double copy_gbps) {
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  char t[32], g[32], p[32];
  std::snprintf(t, sizeof t, "%.3f", ms);
  std::snprintf(g, sizeof g, "%.0f", gbps);
  std::snprintf(p, sizeof p, "%.0f%%", 100 * gbps / copy_gbps);
  return {{op, shape, t, g, p}};
}

Tensor randn(const Shape& shape, DType dt, uint64_t key) {
  Tensor t = Tensor::empty(shape, dt, Device::cuda());
  fill_normal(t, key, 0.0, 1.0);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t B = 4, T = 4096, K = 4, V = 151936, D = 1024, N = 16384;
  std::vector<int64_t> channels{4096, 6144};
  CLI::App app{"bench_conv1d: causal depthwise conv1d and the embedding's gather and scatter-add"};
  app.add_option("--batch", B, "conv: sequences")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seq", T, "conv: tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--channels", channels, "conv: channels, one or more")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--kernel", K, "conv: kernel width")->capture_default_str()->check(CLI::Range(2, 8));
  app.add_option("--vocab", V, "embedding: rows of the table")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--dim", D, "embedding: row width")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--ids", N, "embedding: ids looked up")->capture_default_str()->check(CLI::PositiveNumber);
  bench::parse_or_exit(app, argc, argv);
  if (!cuda::available()) {
    std::puts("bench_conv1d: no CUDA device");
    return 0;
  }
  const double copy_gbps = bench::measure_copy_gbps();
  std::printf("# bench_conv1d on %s, %s; copy ceiling %.0f GB/s\n\n", bench::device_name().c_str(),
              bench::today().c_str(), copy_gbps);
  std::vector<bench::Row> rows;

  for (int64_t C : channels) {
    const std::string shape = fmt::format("B={} T={} C={} K={} bf16", B, T, C, K);
    const Tensor x = randn({B, T, C}, DType::BF16, 1), dy = randn({B, T, C}, DType::BF16, 2);
    const Tensor w = randn({C, K}, DType::BF16, 3), bias = randn({C}, DType::BF16, 4);
    const Tensor dw = Tensor::zeros({C, K}, DType::F32, Device::cuda()),
                 db = Tensor::zeros({C}, DType::F32, Device::cuda());
    const double act_bytes = double(B * T * C) * 2;
    const double fwd = bench::median_ms([&] { (void)ops::causal_conv1d(x, w, bias, true, {}, nullptr); });
    rows.push_back(row("conv1d fwd (x read, y written)", shape, fwd, 2 * act_bytes, copy_gbps));
    const double bwd =
        bench::median_ms([&] { (void)ops::causal_conv1d_backward(dy, x, w, bias, true, {}, {}, dw, db, nullptr); });
    rows.push_back(row("conv1d bwd (dy, x read, dx written)", shape, bwd, 3 * act_bytes, copy_gbps));
  }

  const Tensor table = randn({V, D}, DType::BF16, 5), dy = randn({N, D}, DType::BF16, 6);
  std::vector<int64_t> id_values(N);
  for (int64_t i = 0; i < N; ++i) id_values[size_t(i)] = int64_t(uniform01(7, uint64_t(i)) * double(V)) % V;
  const size_t unique = std::set<int64_t>(id_values.begin(), id_values.end()).size();
  const Tensor ids = Tensor::from_vector(id_values, {N}, DType::I32, Device::cuda());
  const Tensor dtable = Tensor::zeros({V, D}, DType::F32, Device::cuda());
  const std::string shape = fmt::format("V={} D={} N={} bf16", V, D, N);
  const double efwd = bench::median_ms([&] { (void)ops::embedding(table, ids); });
  rows.push_back(row("embedding fwd (rows read, out written)", shape, efwd, 2.0 * N * D * 2, copy_gbps));
  const double ebwd = bench::median_ms([&] { ops::embedding_backward(dy, ids, dtable); });
  rows.push_back(row("embedding bwd (dy read, f32 rows read+written)", shape + " unique=" + std::to_string(unique),
                     ebwd, double(N) * D * 2 + 2.0 * double(unique) * D * 4, copy_gbps));

  bench::print_table({"op", "shape", "ms", "GB/s", "% of copy"}, rows);
  return 0;
}
