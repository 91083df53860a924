// Benchmark support: median timing of GPU work with CUDA events, the device-to-device copy ceiling,
// and the table format every benchmark prints.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "layers/model_config.h"

namespace primer::bench {

// The Qwen3-0.6B shape (hidden 1024, 16 q / 8 kv heads of 128, FFN 3072, vocab 151936, tied embeddings) with
// `layers` decoder layers (28 in the real model).
ModelConfig qwen3_0_6b(int64_t layers = 28);

// Median milliseconds of fn() over `iters` runs after `warmup` runs, timed with CUDA events on the compute stream.
double median_ms(const std::function<void()>& fn, int warmup = 5, int iters = 30);

// Device-to-device copy bandwidth in GB/s counting bytes read plus bytes written (the memory ceiling).
double measure_copy_gbps(size_t bytes = size_t(2) << 30);

struct Row {
  std::vector<std::string> cells;
};
// Prints a Markdown table (header + rows) to stdout.
void print_table(const std::vector<std::string>& header, const std::vector<Row>& rows);

std::string device_name();
std::string today();  // YYYY-MM-DD

}  // namespace primer::bench
