#include "tools/bench/common/bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/tensor.h"

namespace primer::bench {

#ifdef PRIMER_WITH_CUDA
double median_ms(const std::function<void()>& fn, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t a, b;
  PRIMER_CUDA_CHECK(cudaEventCreate(&a));
  PRIMER_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    PRIMER_CUDA_CHECK(cudaEventRecord(a, cuda::stream()));
    fn();
    PRIMER_CUDA_CHECK(cudaEventRecord(b, cuda::stream()));
    PRIMER_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    PRIMER_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    times.push_back(ms);
  }
  PRIMER_CUDA_CHECK(cudaEventDestroy(a));
  PRIMER_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double measure_copy_gbps(size_t bytes) {
  Tensor src = Tensor::full({int64_t(bytes)}, 1.0, DType::U8, Device::cuda());
  Tensor dst = Tensor::empty({int64_t(bytes)}, DType::U8, Device::cuda());
  const double ms = median_ms([&] { dst.copy_from(src); });
  return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

std::string device_name() {
  cudaDeviceProp p{};
  PRIMER_CUDA_CHECK(cudaGetDeviceProperties(&p, cuda::current_device()));
  return p.name;
}
#else
double median_ms(const std::function<void()>&, int, int) { PRIMER_FAIL("benchmarks need a CUDA build"); }
double measure_copy_gbps(size_t) { PRIMER_FAIL("benchmarks need a CUDA build"); }
std::string device_name() { return "cpu"; }
#endif

void print_table(const std::vector<std::string>& header, const std::vector<Row>& rows) {
  auto line = [](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (const auto& c : cells) s += " " + c + " |";
    std::puts(s.c_str());
  };
  line(header);
  std::string sep = "|";
  for (size_t i = 0; i < header.size(); ++i) sep += "---|";
  std::puts(sep.c_str());
  for (const auto& r : rows) line(r.cells);
  std::fflush(stdout);
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

ModelConfig qwen3_0_6b(int64_t layers) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 151936;
  c.hidden_size = 1024;
  c.intermediate_size = 3072;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.qk_norm = true;
  c.tie_word_embeddings = true;
  c.rope_theta = 1e6;
  c.max_position_embeddings = 40960;
  return c;
}

}  // namespace primer::bench
