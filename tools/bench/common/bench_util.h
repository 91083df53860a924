// Benchmark support: median timing of GPU work with CUDA events, the device-to-device copy ceiling,
// and the table format every benchmark prints.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace primer::bench {

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
