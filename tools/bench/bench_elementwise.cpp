// Memory-bound op throughput: elementwise, reductions and softmax on CUDA, as achieved GB/s of the minimum traffic
// (each input read once, each output written once) and as a fraction of the device-to-device copy ceiling.
#include <fmt/format.h>

#include <cstdio>
#include <functional>

#include "core/ops/cuda/copy.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/ops/softmax.h"
#include "core/rng.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

Tensor random_cuda(const Shape& shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt, Device::cuda());
  fill_normal(t, 1234, 0.0, 1.0);
  return t;
}

}  // namespace

int main() {
  const double ceiling = bench::measure_copy_gbps();
  std::vector<bench::Row> rows;
  auto run = [&](const std::string& op, DType dt, const Shape& shape, double bytes_per_element,
                 const std::function<void()>& fn) {
    const double ms = bench::median_ms(fn);
    const double gbps = bytes_per_element * double(shape_numel(shape)) / (ms * 1e-3) / 1e9;
    rows.push_back({{op, dtype_name(dt), shape_str(shape), fmt::format("{:.3f}", ms), fmt::format("{:.0f}", gbps),
                     fmt::format("{:.0f}%", 100 * gbps / ceiling)}});
  };

  const Shape act{8192, 4096};
  for (DType dt : {DType::BF16, DType::F32}) {
    const double b = double(dtype_size(dt));
    const Tensor x = random_cuda(act, dt), y = random_cuda(act, dt), bias = random_cuda({4096}, dt);
    run("add", dt, act, 3 * b, [&] { ops::add(x, y); });
    run("add (row broadcast)", dt, act, 2 * b, [&] { ops::add(x, bias); });
    run("silu", dt, act, 2 * b, [&] { ops::unary(ops::Unary::Silu, x); });
    run("silu backward", dt, act, 3 * b, [&] { ops::unary_backward(ops::Unary::Silu, x, y); });
    run("sum dim 0 (bias grad)", dt, act, b, [&] { ops::sum(x, 0); });
    run("sum dim 1 of [8,1024,4096]", dt, act, b, [&] { ops::sum(x.view({8, 1024, 4096}), 1); });
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

  const Shape vocab{2048, 151936}, attn{65536, 256};
  for (const Shape& s : {vocab, attn}) {
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
