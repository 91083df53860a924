#include "tools/bench/common/bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "layers/hybrid_config.h"

#ifdef PRIMER_WITH_CUDA
#include <cuda_profiler_api.h>
#endif

namespace primer::bench {
namespace {

// A benchmark that cannot run (no CUDA device, a shape a kernel refuses) throws primer::Error from main; without a
// handler that ends in abort() and exit status 134, which reads like a crash. Print the message and exit 1 instead.
const bool kErrorsExitCleanly = [] {
  std::set_terminate([] {
    try {
      if (const std::exception_ptr e = std::current_exception()) std::rethrow_exception(e);
      std::fputs("benchmark: terminated\n", stderr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "benchmark: error: %s\n", e.what());
    } catch (...) {
      std::fputs("benchmark: error: an unknown exception\n", stderr);
    }
    std::_Exit(1);
  });
  return true;
}();

}  // namespace

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

std::vector<PhaseTime> phase_times(const std::vector<std::function<void()>>& phases, int iters) {
  const size_t n = phases.size();
  std::vector<cudaEvent_t> events(n + 1);
  for (cudaEvent_t& e : events) PRIMER_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<std::vector<double>> gpu(n), host(n);
  std::vector<double> syncs(n), wait_ms(n);
  for (int it = 0; it <= iters; ++it) {  // round 0 warms up
    cuda::synchronize();
    std::vector<double> host_ms(n);
    PRIMER_CUDA_CHECK(cudaEventRecord(events[0], cuda::stream()));
    for (size_t p = 0; p < n; ++p) {
      const auto t0 = std::chrono::steady_clock::now();
      const cuda::SyncStats s0 = cuda::sync_stats();
      phases[p]();
      PRIMER_CUDA_CHECK(cudaEventRecord(events[p + 1], cuda::stream()));
      host_ms[p] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const cuda::SyncStats s1 = cuda::sync_stats();
      if (it > 0) syncs[p] += double(s1.count - s0.count) / iters, wait_ms[p] += (s1.wait_ms - s0.wait_ms) / iters;
    }
    PRIMER_CUDA_CHECK(cudaEventSynchronize(events[n]));
    for (size_t p = 0; it > 0 && p < n; ++p) {
      float ms = 0;
      PRIMER_CUDA_CHECK(cudaEventElapsedTime(&ms, events[p], events[p + 1]));
      gpu[p].push_back(ms);
      host[p].push_back(host_ms[p]);
    }
  }
  for (cudaEvent_t& e : events) PRIMER_CUDA_CHECK(cudaEventDestroy(e));
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<PhaseTime> out;
  for (size_t p = 0; p < n; ++p) out.push_back({median(gpu[p]), median(host[p]), syncs[p], wait_ms[p]});
  return out;
}

double profiled_once_ms(const std::function<void()>& fn) {
  cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  PRIMER_CUDA_CHECK(cudaProfilerStart());
  fn();
  cuda::synchronize();
  PRIMER_CUDA_CHECK(cudaProfilerStop());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
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
double profiled_once_ms(const std::function<void()>&) { PRIMER_FAIL("benchmarks need a CUDA build"); }
std::vector<PhaseTime> phase_times(const std::vector<std::function<void()>>&, int) {
  PRIMER_FAIL("benchmarks need a CUDA build");
}
double measure_copy_gbps(size_t) { PRIMER_FAIL("benchmarks need a CUDA build"); }
std::string device_name() { return "cpu"; }
#endif

double median_ms_on(Device device, const std::function<void()>& fn, int warmup, int iters) {
  if (device.is_cuda()) return median_ms(fn, warmup, iters);
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

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

ModelConfig qwen3_shape(const std::string& name, int64_t layers) {
  struct Shape {
    const char* name;
    int64_t hidden, heads, kv_heads, ffn, layers;
    bool tied;
  };
  static constexpr Shape kShapes[] = {{"0.6b", 1024, 16, 8, 3072, 28, true},
                                      {"1.7b", 2048, 16, 8, 6144, 28, true},
                                      {"4b", 2560, 32, 8, 9728, 36, true},
                                      {"8b", 4096, 32, 8, 12288, 36, false}};
  for (const Shape& s : kShapes) {
    if (name != s.name) continue;
    ModelConfig c;
    c.model_type = "qwen3";
    c.vocab_size = 151936;
    c.hidden_size = s.hidden;
    c.intermediate_size = s.ffn;
    c.num_hidden_layers = layers > 0 ? layers : s.layers;
    c.num_attention_heads = s.heads;
    c.num_key_value_heads = s.kv_heads;
    c.head_dim = 128;
    c.qk_norm = true;
    c.tie_word_embeddings = s.tied;
    c.rope_theta = 1e6;
    c.max_position_embeddings = 40960;
    return c;
  }
  PRIMER_FAIL("unknown Qwen3 shape '{}' (known: 0.6b, 1.7b, 4b, 8b)", name);
}

void apply_pattern(ModelConfig& c, const std::string& pattern) {
  if (pattern.empty()) return;
  const std::vector<MixerKind> unit = parse_hybrid_pattern(pattern, "--pattern");
  c.layer_types.clear();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) c.layer_types.push_back(unit[size_t(l) % unit.size()]);
}

std::string fixed(double v, int digits) {
  char s[32];
  std::snprintf(s, sizeof s, "%.*f", digits, v);
  return s;
}

Tensor normal_gpu(const Shape& shape, uint64_t key, DType dtype, double mean, double std) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda());
  fill_normal(t, key, mean, std);
  return t;
}

}  // namespace primer::bench
