// Causal flash attention, bf16: forward and forward + backward at each --seq T with B = max(1, --tokens / T) sequences
// (--batch fixes B instead); by default 16 heads of 128 at T = 2048 ... 32768 and 16,384 tokens (B = 8, T = 2048 is
// the shape); --kv-heads below --heads for grouped-query attention. FLOPs count only the visible half of the
// score matrix: forward 2 * (2 * B * H * T^2 * Dh) / 2, forward + backward 3.5x that (FlashAttention's convention).
// Besides the Markdown table, one "csv,<pass>,<B>,<T>,<ms>" line per result lets tools/bench/sdpa_peer.py (given
// the same shape options) print the side-by-side table against PyTorch SDPA.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/ops/attention.h"
#include "core/rng.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

Tensor random_gpu(const Shape& shape, uint64_t key) {
  Tensor t = Tensor::empty(shape, DType::BF16, Device::cuda());
  fill_normal(t, key, 0.0, 1.0);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> seq_lens{2048, 4096, 8192, 16384, 32768};
  int64_t tokens = 16384, batch = 0, heads = 16, kv_heads = 0, head_dim = 128;
  CLI::App app{"bench_attention: causal flash attention, forward and forward + backward"};
  app.add_option("--seq", seq_lens, "tokens per sequence, one or more")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--tokens", tokens, "tokens per step: B = max(1, tokens / T)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "sequences at every T (instead of --tokens)")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "query heads")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--kv-heads", kv_heads, "key/value heads, dividing --heads (default: --heads)")
      ->check(CLI::PositiveNumber);
  app.add_option("--head-dim", head_dim, "head_dim")->capture_default_str()->check(CLI::IsMember({64, 128}));
  bench::parse_or_exit(app, argc, argv);
  if (kv_heads == 0) kv_heads = heads;
  if (heads % kv_heads != 0) {
    std::fprintf(stderr, "bench_attention: --kv-heads %ld does not divide --heads %ld\n", long(kv_heads), long(heads));
    return 2;
  }
  if (!cuda::available()) {
    std::puts("bench_attention: no CUDA device");
    return 0;
  }
  std::printf("# causal attention, bf16, Hq = %ld, Hkv = %ld, Dh = %ld, %s, %s\n", long(heads), long(kv_heads),
              long(head_dim), bench::device_name().c_str(), bench::today().c_str());
  std::vector<bench::Row> rows;
  std::vector<std::string> csv;
  for (int64_t T : seq_lens) {
    const int64_t B = batch > 0 ? batch : std::max<int64_t>(1, tokens / T);
    const Tensor q = random_gpu({B, T, heads, head_dim}, 1);
    const Tensor k = random_gpu({B, T, kv_heads, head_dim}, 2), v = random_gpu({B, T, kv_heads, head_dim}, 3);
    const Tensor dout = random_gpu({B, T, heads, head_dim}, 4);
    const ops::AttentionOptions opt;  // causal, scale 1/sqrt(Dh)
    Tensor lse, dq, dk, dv;
    const double fwd_flops = 2.0 * double(B * heads) * double(T) * double(T) * double(head_dim);
    const double fwd_ms = bench::median_ms([&] { ops::attention(q, k, v, opt, &lse); });
    const double train_ms = bench::median_ms([&] {
      const Tensor out = ops::attention(q, k, v, opt, &lse);
      ops::attention_backward(dout, q, k, v, out, lse, opt, &dq, &dk, &dv);
    });
    const std::string shape_s = "B=" + std::to_string(B) + " T=" + std::to_string(T);
    for (auto [pass, ms, flops] :
         {std::tuple{"fwd", fwd_ms, fwd_flops}, std::tuple{"fwd+bwd", train_ms, 3.5 * fwd_flops}}) {
      rows.push_back({{pass, shape_s, bench::fixed(ms, 3), bench::fixed(flops / (ms * 1e-3) / 1e12, 1)}});
      csv.push_back("csv," + std::string(pass) + "," + std::to_string(B) + "," + std::to_string(T) + "," +
                    bench::fixed(ms, 4));
    }
  }
  bench::print_table({"pass", "shape", "ms", "TFLOP/s"}, rows);
  for (const std::string& line : csv) std::printf("%s\n", line.c_str());
  return 0;
}
