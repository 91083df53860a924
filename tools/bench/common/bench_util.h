// Benchmark support: median timing of GPU work with CUDA events, the device-to-device copy ceiling,
// and the table format every benchmark prints.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "layers/model_config.h"

namespace primer::bench {

// A Qwen3 shape by its name, from the released config.json files (vocab 151936, heads of 128, QK-norm, rope_theta
// 1e6): "0.6b" (hidden 1024, 16 q / 8 kv heads, FFN 3072, 28 layers, tied embeddings), "1.7b" (2048, 16/8, 6144, 28,
// tied), "4b" (2560, 32/8, 9728, 36, tied), "8b" (4096, 32/8, 12288, 36, untied). `layers` > 0 replaces the layer
// count. Unknown names are an error listing the known ones.
ModelConfig qwen3_shape(const std::string& name, int64_t layers = 0);
// The hybrid_override_pattern `pattern` (empty: unchanged) repeated over c's layers ('*-GDN': a 50% GDN hybrid).
void apply_pattern(ModelConfig& c, const std::string& pattern);

// Median milliseconds of fn() over `iters` runs after `warmup` runs, timed with CUDA events on the compute stream.
double median_ms(const std::function<void()>& fn, int warmup = 5, int iters = 30);

// Median milliseconds of fn() on `device`: CUDA events on a GPU (median_ms), the wall clock on the CPU.
double median_ms_on(Device device, const std::function<void()>& fn, int warmup, int iters);

// Runs the phases in order, `iters` times after one warm-up round, and returns each phase's median GPU milliseconds
// (CUDA events between the phases) and median host milliseconds to enqueue it (no synchronisation between phases):
// where the host takes about as long as the GPU, the GPU waits for launches or for the host's own waits.
struct PhaseTime {
  double gpu_ms, host_ms;
  double syncs, sync_wait_ms;  // the host's waits on the stream within the phase (cuda::sync_stats), per round
};
std::vector<PhaseTime> phase_times(const std::vector<std::function<void()>>& phases, int iters = 5);

// Runs fn() once between cudaProfilerStart and cudaProfilerStop (what `ncu --profile-from-start off` records) and
// returns its wall-clock milliseconds, host work included.
double profiled_once_ms(const std::function<void()>& fn);

// Device-to-device copy bandwidth in GB/s counting bytes read plus bytes written (the memory ceiling).
double measure_copy_gbps(size_t bytes = size_t(2) << 30);

struct Row {
  std::vector<std::string> cells;
};
// Prints a Markdown table (header + rows) to stdout.
void print_table(const std::vector<std::string>& header, const std::vector<Row>& rows);

std::string device_name();
std::string today();  // YYYY-MM-DD

// v with `digits` decimals, for a table cell.
std::string fixed(double v, int digits);

// A CUDA tensor of N(mean, std²) entries drawn from the counter-based generator under `key`.
Tensor normal_gpu(const Shape& shape, uint64_t key, DType dtype, double mean = 0, double std = 1);

}  // namespace primer::bench
