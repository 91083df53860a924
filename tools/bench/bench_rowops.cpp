// Memory-bound row/elementwise ops in bf16 at Llama/Qwen-7B sizes: RMSNorm, SwiGLU and RoPE, forward and backward.
// GB/s counts the minimum traffic (each input read once, each output written once) against the measured
// device-to-device copy bandwidth.
#include <cstdio>
#include <functional>
#include <string>

#include "core/cuda_runtime.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/swiglu.h"
#include "core/rng.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

constexpr int64_t kTokens = 16384;  // B * T
constexpr int64_t kHidden = 4096;
constexpr int64_t kFfn = 11008;
constexpr int64_t kBatch = 4, kHeads = 32, kHeadDim = 128;

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

int main() {
  PRIMER_CHECK(cuda::available(), "bench_rowops needs a CUDA device");
  Bench b{bench::measure_copy_gbps(), {}};
  const double e = 2;  // bytes per bf16 element
  const DType bf = DType::BF16;

  // RMSNorm over the hidden size: a 7B model's, and Qwen3-0.6B's (rows of 2 KB, where a row's latency weighs more).
  for (const int64_t hidden : {kHidden, int64_t(1024)}) {
    Tensor x = random_gpu({kTokens, hidden}, bf, 1), w = random_gpu({hidden}, bf, 2);
    Tensor dy = random_gpu({kTokens, hidden}, bf, 3), dw = Tensor::zeros({hidden}, DType::F32, Device::cuda());
    Tensor rstd;
    ops::rmsnorm(x, w, 1e-6, &rstd);
    const double act = double(kTokens * hidden) * e, par = double(hidden) * e, stat = double(kTokens) * 4;
    const std::string shape = "[" + std::to_string(kTokens) + ", " + std::to_string(hidden) + "]";
    b.add("rmsnorm fwd", shape, 2 * act + par + stat, [&] { ops::rmsnorm(x, w, 1e-6, &rstd); });
    // dy, x, w, rstd in; dx out; dw read and written (f32).
    b.add("rmsnorm bwd (dx+dw)", shape, 3 * act + par + stat + 2.0 * hidden * 4,
          [&] { ops::rmsnorm_backward(dy, x, w, rstd, dw); });
  }
  {  // SwiGLU on the MLP's intermediate size.
    Tensor gate = random_gpu({kTokens, kFfn}, bf, 4), up = random_gpu({kTokens, kFfn}, bf, 5);
    Tensor dh = random_gpu({kTokens, kFfn}, bf, 6);
    const double act = double(kTokens * kFfn) * e;
    const std::string shape = "[" + std::to_string(kTokens) + ", " + std::to_string(kFfn) + "]";
    b.add("swiglu fwd", shape, 3 * act, [&] { ops::swiglu(gate, up); });
    Tensor dgate, dup;
    b.add("swiglu bwd", shape, 5 * act, [&] { ops::swiglu_backward(dh, gate, up, &dgate, &dup); });
  }
  {  // RoPE on q: [B, T, H, Dh] with B * T = 16384 tokens.
    const int64_t T = kTokens / kBatch;
    Tensor x = random_gpu({kBatch, T, kHeads, kHeadDim}, bf, 7);
    std::vector<int32_t> p(static_cast<size_t>(kTokens));
    for (int64_t i = 0; i < kTokens; ++i) p[size_t(i)] = int32_t(i % T);
    Tensor pos = Tensor::from_vector(p, {kBatch, T}, DType::I32, Device::cuda());
    Tensor inv_freq = ops::rope_inv_freq(kHeadDim, 1e6).to(Device::cuda());
    const double bytes = 2.0 * double(x.numel()) * e + double(kTokens) * 4 + double(kHeadDim / 2) * 4;
    const std::string shape = "[" + std::to_string(kBatch) + ", " + std::to_string(T) + ", " + std::to_string(kHeads) +
                              ", " + std::to_string(kHeadDim) + "]";
    b.add("rope fwd", shape, bytes, [&] { ops::rope(x, pos, inv_freq); });
    b.add("rope bwd", shape, bytes, [&] { ops::rope_backward(x, pos, inv_freq); });
  }

  std::printf("bench_rowops: %s, %s, bf16, copy bandwidth %.0f GB/s\n", bench::device_name().c_str(),
              bench::today().c_str(), b.copy_gbps);
  bench::print_table({"op", "shape", "median ms", "GB/s", "% of copy"}, b.rows);
  return 0;
}
