// Kaczmarz linear attention (KZLA) against Gated DeltaNet on CUDA, by default at flash-linear-attention's shape (B = 4,
// T = 4096, H = 16, K = V = 128, bf16 q/k/v, f32 gates): the cores through autograd (ag::gated_delta_rule on unit
// keys, ag::kaczmarz_delta_rule on raw keys: the same kernels plus the key-norm ops around them), forward and
// forward + backward; then both whole layers (by default hidden 2048, Hq = 16, Hk = 8, head_dim 128) forward +
// backward.
#include <cmath>
#include <cstdio>
#include <string>

#include "core/autograd/functions.h"
#include "core/autograd/gated_delta_rule.h"
#include "core/autograd/kaczmarz_delta_rule.h"
#include "core/cuda_runtime.h"
#include "core/ops/elementwise.h"
#include "core/rng.h"
#include "layers/gdn_mixer.h"
#include "layers/ssm_blocks.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

void bench_cores(const bench::LayerShape& shape, std::vector<bench::Row>& rows) {
  const int64_t B = shape.batch, T = shape.seq, H = shape.heads, D = shape.head_dim;
  const double scale = 1.0 / std::sqrt(double(D));
  Tensor q, unit_k, raw_k, v, eta, g, dout;
  {
    ag::NoGrad no_grad;
    q = layers::l2_normalize(ag::constant(bench::normal_gpu({B, T, H, D}, 1, DType::BF16)), 1e-6)->value;
    raw_k = bench::normal_gpu({B, T, H, D}, 2, DType::BF16);
    unit_k = layers::l2_normalize(ag::constant(raw_k), 1e-6)->value;
    v = bench::normal_gpu({B, T, H, D}, 3, DType::BF16);
    eta = ops::unary(ops::Unary::Sigmoid, bench::normal_gpu({B, T, H}, 4, DType::F32));
    g = ops::scale(ops::unary(ops::Unary::Softplus, ops::scale(bench::normal_gpu({B, T, H}, 5, DType::F32), -1.0)),
                   -1.0);
    dout = bench::normal_gpu({B, T, H, D}, 6, DType::BF16);
  }
  auto run = [&](bool kaczmarz, bool backward) {
    std::vector<ag::Var> x;
    for (const Tensor& t : {q, kaczmarz ? raw_k : unit_k, v, g, eta})
      x.push_back(backward ? ag::leaf(t) : ag::constant(t));
    const ag::Var o = kaczmarz ? ag::kaczmarz_delta_rule(x[0], x[1], x[2], x[3], x[4], scale, 1e-6, nullptr, nullptr)
                               : ag::gated_delta_rule(x[0], x[1], x[2], x[3], x[4], scale, nullptr, nullptr);
    if (!backward) return;
    o->grad = dout;
    ag::current_tape().backward();
  };
  for (bool kaczmarz : {false, true}) {
    const double fwd = bench::median_ms([&] {
      ag::NoGrad no_grad;
      run(kaczmarz, false);
    });
    const double train = bench::median_ms([&] { run(kaczmarz, true); });
    rows.push_back({{kaczmarz ? "KZLA core" : "GDN core", shape.core(), bench::fixed(fwd, 3), bench::fixed(train, 3)}});
  }
}

void bench_layers(const bench::LayerShape& shape, std::vector<bench::Row>& rows) {
  const ModelConfig c = shape.layer_config();
  const int64_t B = shape.batch, T = shape.seq;
  const Tensor x = bench::normal_gpu({B, T, c.hidden_size}, 8, DType::BF16);
  const Tensor dy = bench::normal_gpu({B, T, c.hidden_size}, 9, DType::BF16);
  for (layers::DeltaStep step : {layers::DeltaStep::Gated, layers::DeltaStep::Kaczmarz}) {
    ParameterRegistry params;
    layers::GdnMixer mixer(c, "layer", params, step);
    params.materialize(Device::cuda(), DType::BF16, 7);
    const double fwd = bench::median_ms([&] {
      ag::NoGrad no_grad;
      mixer.forward(ag::constant(x), {});
    });
    const double train = bench::median_ms([&] {
      const ag::Var y = mixer.forward(ag::leaf(x), {});
      y->grad = dy;
      ag::current_tape().backward();
    });
    rows.push_back({{step == layers::DeltaStep::Kaczmarz ? "KZLA layer" : "GDN layer", shape.layer(),
                     bench::fixed(fwd, 3), bench::fixed(train, 3)}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::LayerShape shape;
  CLI::App app{"bench_kzla: Kaczmarz linear attention against Gated DeltaNet, cores and layers, on CUDA"};
  bench::add_layer_shape(app, shape);
  bench::parse_or_exit(app, argc, argv);
  PRIMER_CHECK(cuda::available(), "bench_kzla needs a CUDA device");
  std::printf("# KZLA vs GDN, bf16, %s, %s\n", bench::device_name().c_str(), bench::today().c_str());
  std::vector<bench::Row> rows;
  bench_cores(shape, rows);
  bench_layers(shape, rows);
  bench::print_table({"what", "shape", "fwd ms", "fwd+bwd ms"}, rows);
  return 0;
}
