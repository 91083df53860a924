// Kalman linear attention (KLA) on CUDA next to the Mamba-2 core it is measured against (issue target: at most 2×),
// by default at B = 4, T = 4096, H = 16, N = D = 128: the core ops::kalman_scan with f32 per-token tensors (what the
// layer feeds it) and with bf16 ones, forward, backward and forward + backward with the variance readout off (the
// backward from the forward's checkpoints, as training runs it, and recomputing them itself); the GLA core of Mamba-2
// (ops::gla, bf16) at the same shape; then the KLA and Mamba-2 layers (by default hidden 2048, Hq = 16, Hk = 8,
// head_dim 128) forward + backward. "G steps/s" counts filter steps (B·H·N·D·T per pass over the sequence; the
// backward makes three from kept checkpoints, two forward and one reverse, or four recomputing them); each step of the
// kernels takes one reciprocal on the SFU.
#include <cmath>
#include <cstdio>
#include <string>

#include "core/autograd/functions.h"
#include "core/cuda_runtime.h"
#include "core/ops/elementwise.h"
#include "core/ops/gla.h"
#include "core/ops/kalman_scan.h"
#include "core/rng.h"
#include "layers/kla_mixer.h"
#include "layers/mamba2_mixer.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"
#include "tools/bench/common/layer_bench.h"

using namespace primer;

namespace {

void bench_kla_core(const bench::LayerShape& shape, DType dtype, std::vector<bench::Row>& rows) {
  const int64_t B = shape.batch, T = shape.seq, H = shape.heads, N = shape.head_dim, D = shape.head_dim;
  const double scale = 1.0 / std::sqrt(double(N));
  ag::NoGrad no_grad;
  // Keys and queries of about unit norm, Λᵛ = softplus(z) + 1e-4 as the layer makes it, the authors' init for ā, p̄.
  const Tensor q = ops::scale(bench::normal_gpu({B, T, H, N}, 1, dtype), scale),
               k = ops::scale(bench::normal_gpu({B, T, H, N}, 2, dtype), scale),
               v = bench::normal_gpu({B, T, H, D}, 3, dtype),
               lv = ops::unary(ops::Unary::Softplus, bench::normal_gpu({B, T, H, D}, 4, dtype)),
               a = ops::unary(
                   ops::Unary::Exp,
                   ops::scale(ops::unary(ops::Unary::Exp, bench::normal_gpu({H, N, D}, 5, DType::F32, -4, 1)), -1.0)),
               p = Tensor::full({H, N, D}, 1e-4, DType::F32, Device::cuda()),
               lam0 = Tensor::full({B, H, N, D}, 1.0, DType::F32, Device::cuda()),
               eta0 = Tensor::zeros({B, H, N, D}, DType::F32, Device::cuda()),
               dy = bench::normal_gpu({B, T, H, D}, 6, dtype);
  const double fwd = bench::median_ms([&] { ops::kalman_scan(q, k, v, lv, a, p, lam0, eta0, false, true); });
  const Tensor checkpoints = ops::kalman_scan(q, k, v, lv, a, p, lam0, eta0, false, true).checkpoints;
  const double bwd = bench::median_ms(
      [&] { ops::kalman_scan_backward(dy, Tensor(), Tensor(), Tensor(), q, k, v, lv, a, p, lam0, eta0, checkpoints); });
  const double bwd_recomputing = bench::median_ms(
      [&] { ops::kalman_scan_backward(dy, Tensor(), Tensor(), Tensor(), q, k, v, lv, a, p, lam0, eta0); });
  const double train = bench::median_ms([&] {
    const ops::KalmanScanOutputs o = ops::kalman_scan(q, k, v, lv, a, p, lam0, eta0, false, true);
    ops::kalman_scan_backward(dy, Tensor(), Tensor(), Tensor(), q, k, v, lv, a, p, lam0, eta0, o.checkpoints);
  });
  const double steps = double(B * H * N * D * T);
  const std::string what = std::string("KLA core, ") + (dtype == DType::BF16 ? "bf16" : "f32") + " I/O";
  auto row = [&](const std::string& pass, double ms, double passes) {
    rows.push_back(
        {{what + ", " + pass, shape.core(), bench::fixed(ms, 3), bench::fixed(passes * steps / ms / 1e6, 1)}});
  };
  row("forward (keeping checkpoints)", fwd, 1);
  row("backward from them", bwd, 3);
  row("backward recomputing them", bwd_recomputing, 4);
  row("fwd + bwd", train, 4);
}

void bench_mamba2_core(const bench::LayerShape& shape, std::vector<bench::Row>& rows) {
  const int64_t B = shape.batch, T = shape.seq, H = shape.heads, Dh = shape.head_dim;
  ag::NoGrad no_grad;
  const Tensor q = bench::normal_gpu({B, T, H, Dh}, 11, DType::BF16),
               v = bench::normal_gpu({B, T, H, Dh}, 13, DType::BF16),
               k = ops::scale(bench::normal_gpu({B, T, H, Dh}, 12, DType::BF16), 1.0 / std::sqrt(double(Dh))),
               dout = bench::normal_gpu({B, T, H, Dh}, 14, DType::BF16),
               g = ops::scale(ops::unary(ops::Unary::Softplus, bench::normal_gpu({B, T, H}, 15, DType::F32)), -0.1);
  const double fwd = bench::median_ms([&] { ops::gla(q, k, v, g, 1.0, Tensor(), nullptr); });
  const double train = bench::median_ms([&] {
    ops::gla(q, k, v, g, 1.0, Tensor(), nullptr);
    ops::gla_backward(dout, q, k, v, g, 1.0, Tensor(), Tensor());
  });
  rows.push_back({{"Mamba-2 core (GLA), bf16, forward", shape.core(), bench::fixed(fwd, 3), ""}});
  rows.push_back({{"Mamba-2 core (GLA), bf16, fwd + bwd", shape.core(), bench::fixed(train, 3), ""}});
}

}  // namespace

int main(int argc, char** argv) {
  bench::LayerShape shape;
  CLI::App app{"bench_kla: Kalman linear attention's core and layer on CUDA, next to Mamba-2's"};
  bench::add_layer_shape(app, shape);
  bench::parse_or_exit(app, argc, argv);
  PRIMER_CHECK(cuda::available(), "bench_kla needs a CUDA device");
  std::printf("# KLA vs Mamba-2, %s, %s\n", bench::device_name().c_str(), bench::today().c_str());
  std::vector<bench::Row> rows;
  bench_kla_core(shape, DType::F32, rows);
  bench_kla_core(shape, DType::BF16, rows);
  bench_mamba2_core(shape, rows);
  rows.push_back(bench::mixer_train_row<layers::KlaMixer>(shape, "KLA", "model.layers.0.kla"));
  rows.push_back(bench::mixer_train_row<layers::Mamba2Mixer>(shape, "Mamba-2", "model.layers.0.mamba"));
  bench::print_table({"what", "shape", "ms", "G steps/s"}, rows);
  return 0;
}
