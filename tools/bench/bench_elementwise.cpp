// Memory-bound op throughput: elementwise, reductions and softmax on CUDA, as achieved GB/s of the minimum traffic
// (each input read once, each output written once) and as a fraction of the device-to-device copy ceiling. The shapes
// are options: by default activations [8192, 4096], softmax over the LM head's rows [2048, 151936] and attention's
// [65536, 256].
#include <fmt/format.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/copy.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/ops/softmax.h"
#include "core/rng.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

Tensor random_cuda(const Shape& shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt, Device::cuda());
  fill_normal(t, 1234, 0.0, 1.0);
  return t;
}

// "ROWSxCOLS" as a shape, or an empty one.
Shape parse_rows_cols(const std::string& text) {
  long rows = 0, cols = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%ldx%ld%c", &rows, &cols, &tail) != 2 || rows <= 0 || cols <= 0) return {};
  return {rows, cols};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t act_rows = 8192, act_cols = 4096;
  std::vector<std::string> softmax_shapes{"2048x151936", "65536x256"};
  CLI::App app{"bench_elementwise: elementwise ops, reductions, casts and softmax, GB/s against the copy ceiling"};
  app.add_option("--rows", act_rows, "activations' rows (a multiple of 8)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--cols", act_cols, "activations' columns")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--softmax", softmax_shapes, "softmax shapes, ROWSxCOLS, one or more")->capture_default_str();
  bench::parse_or_exit(app, argc, argv);
  if (act_rows % 8 != 0) {
    std::fprintf(stderr, "bench_elementwise: --rows %ld is not a multiple of 8\n", long(act_rows));
    return 2;
  }
  std::vector<Shape> softmax;
  for (const std::string& text : softmax_shapes) {
    softmax.push_back(parse_rows_cols(text));
    if (softmax.back().empty()) {
      std::fprintf(stderr, "bench_elementwise: --softmax %s: expected ROWSxCOLS, e.g. 2048x151936\n", text.c_str());
      return 2;
    }
  }
  if (!cuda::available()) {
    std::puts("bench_elementwise: no CUDA device");
    return 0;
  }
  const double ceiling = bench::measure_copy_gbps();
  std::vector<bench::Row> rows;
  auto run = [&](const std::string& op, DType dt, const Shape& shape, double bytes_per_element,
                 const std::function<void()>& fn) {
    const double ms = bench::median_ms(fn);
    const double gbps = bytes_per_element * double(shape_numel(shape)) / (ms * 1e-3) / 1e9;
    rows.push_back({{op, dtype_name(dt), shape_str(shape), fmt::format("{:.3f}", ms), fmt::format("{:.0f}", gbps),
                     fmt::format("{:.0f}%", 100 * gbps / ceiling)}});
  };

  const Shape act{act_rows, act_cols};
  for (DType dt : {DType::BF16, DType::F32}) {
    const double b = double(dtype_size(dt));
    const Tensor x = random_cuda(act, dt), y = random_cuda(act, dt), bias = random_cuda({act_cols}, dt);
    run("add", dt, act, 3 * b, [&] { ops::add(x, y); });
    run("add (row broadcast)", dt, act, 2 * b, [&] { ops::add(x, bias); });
    run("silu", dt, act, 2 * b, [&] { ops::unary(ops::Unary::Silu, x); });
    run("silu backward", dt, act, 3 * b, [&] { ops::unary_backward(ops::Unary::Silu, x, y); });
    run("sum dim 0 (bias grad)", dt, act, b, [&] { ops::sum(x, 0); });
    const Shape eight_blocks{8, act_rows / 8, act_cols};
    run("sum dim 1 of " + shape_str(eight_blocks), dt, act, b, [&] { ops::sum(x.view(eight_blocks), 1); });
    run("sum last dim", dt, act, b, [&] { ops::sum(x, -1); });
    run("sumsq_all", dt, act, b, [&] { ops::sumsq_all(x); });
  }
  const Tensor acc = random_cuda(act, DType::F32), g = random_cuda(act, DType::BF16);
  run("add_ f32 += bf16", DType::BF16, act, 4 + 4 + 2, [&] { ops::add_(acc, g); });
  // The casts and the hi + lo split around mixed-precision kernels (GKA's precise mode: f32 heads as bf16 operands).
  run("cast f32 -> bf16", DType::F32, act, 4 + 2, [&] { acc.to(DType::BF16); });
  run("cast bf16 -> f32", DType::BF16, act, 2 + 4, [&] { g.to(DType::F32); });
#ifdef PRIMER_WITH_CUDA
  Tensor hi = Tensor::empty(act, DType::BF16, Device::cuda()), lo = Tensor::empty(act, DType::BF16, Device::cuda());
  run("split f32 -> bf16 hi + lo", DType::F32, act, 4 + 2 + 2,
      [&] { ops::cuda_ops::split_bf16(acc.data<float>(), hi.data_ptr(), lo.data_ptr(), acc.numel()); });
#endif

  for (const Shape& s : softmax) {
    const Tensor logits = random_cuda(s, DType::BF16), dy = random_cuda(s, DType::BF16);
    const Tensor probs = ops::softmax(logits);
    run("softmax", DType::BF16, s, 2 * 2, [&] { ops::softmax(logits); });
    run("softmax backward", DType::BF16, s, 3 * 2, [&] { ops::softmax_backward(probs, dy); });
  }

  std::printf("# bench_elementwise on %s, %s; copy ceiling %.0f GB/s\n", bench::device_name().c_str(),
              bench::today().c_str(), ceiling);
  bench::print_table({"op", "dtype", "shape", "ms", "GB/s", "of copy"}, rows);
  return 0;
}
