// Causal flash attention, bf16, head_dim 128 (--head-dim 64), 16 heads: forward and forward + backward at T = 2048 ...
// 32768 with B = max(1, 16384 / T) (B = 8, T = 2048 is the shape). FLOPs count only the visible half of the
// score matrix: forward 2 * (2 * B * H * T^2 * Dh) / 2, forward + backward 3.5x that (FlashAttention's convention).
// Besides the Markdown table, one "csv,<pass>,<B>,<T>,<ms>" line per result lets tools/bench/sdpa_peer.py print
// the side-by-side table against PyTorch SDPA.
#include <algorithm>
#include <cstdio>
#include <string>

#include "core/cuda_runtime.h"
#include "core/ops/attention.h"
#include "core/rng.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

constexpr int64_t kHeads = 16;

Tensor random_gpu(const Shape& shape, uint64_t key) {
  Tensor t = Tensor::empty(shape, DType::BF16, Device::cuda());
  fill_normal(t, key, 0.0, 1.0);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t head_dim = 128;
  CLI::App app{"bench_attention: causal flash attention, forward and forward + backward, T = 2048 ... 32768"};
  app.add_option("--head-dim", head_dim, "head_dim (64 or 128)")->check(CLI::IsMember({64, 128}));
  bench::parse_or_exit(app, argc, argv);
  PRIMER_CHECK(cuda::available(), "bench_attention needs a CUDA device");
  std::printf("# causal attention, bf16, H = %ld, Dh = %ld, %s, %s\n", long(kHeads), long(head_dim),
              bench::device_name().c_str(), bench::today().c_str());
  std::vector<bench::Row> rows;
  std::vector<std::string> csv;
  for (int64_t T : {2048, 4096, 8192, 16384, 32768}) {
    const int64_t B = std::max<int64_t>(1, 16384 / T);
    const Shape shape{B, T, kHeads, head_dim};
    const Tensor q = random_gpu(shape, 1), k = random_gpu(shape, 2), v = random_gpu(shape, 3);
    const Tensor dout = random_gpu(shape, 4);
    const ops::AttentionOptions opt;  // causal, scale 1/sqrt(Dh)
    Tensor lse, dq, dk, dv;
    const double fwd_flops = 2.0 * double(B * kHeads) * double(T) * double(T) * double(head_dim);
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
