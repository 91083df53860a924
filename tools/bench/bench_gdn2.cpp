// Gated DeltaNet-2 on CUDA next to Gated DeltaNet, by default at B = 4, T = 4096, H = 16, K = V = 128 (the issue's
// shape; flash-linear-attention's chunk_gdn2 measured 1.47 ms forward and 7.24 ms forward + backward there): the core
// ops::gated_delta_rule2 through its chunked kernels (bf16 q, k, v: what the layer feeds them) and through the
// recurrent ones (f32 and bf16 q, k, v), forward, backward and forward + backward; the gated delta rule core of GDN
// (ops::gated_delta_rule, bf16) at the same shape; then the GDN-2 and GDN layers (by default hidden 2048, Hq = 16,
// Hk = 8, head_dim 128) forward + backward. Inputs are realistic: q, k L2-normalised per head, g = log σ(z) per key
// channel, b = σ(z), w = σ(z). "TFLOP/s" (recurrent rows) counts the recurrence's 4 multiply-adds per state element and
// token (forward; the backward makes about 14: its own 10 and two recomputations of the state).
#include <cmath>
#include <cstdio>
#include <string>

#include "core/autograd/functions.h"
#include "core/cuda_runtime.h"
#include "core/ops/elementwise.h"
#include "core/ops/gated_delta_rule.h"
#include "core/ops/gated_delta_rule2.h"
#include "core/rng.h"
#include "layers/gdn2_mixer.h"
#include "layers/gdn_mixer.h"
#include "layers/ssm_blocks.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"
#include "tools/bench/common/layer_bench.h"

using namespace primer;

namespace {

Tensor unit_heads(const Shape& shape, uint64_t key, DType dtype) {
  return layers::l2_normalize(ag::constant(bench::normal_gpu(shape, key, dtype)), 1e-6)->value;
}
Tensor sigmoid_gpu(const Shape& shape, uint64_t key) {
  return ops::unary(ops::Unary::Sigmoid, bench::normal_gpu(shape, key, DType::F32));
}
// log σ(z) = −softplus(−z)
Tensor log_sigmoid_gpu(const Shape& shape, uint64_t key) {
  return ops::scale(ops::unary(ops::Unary::Softplus, ops::scale(bench::normal_gpu(shape, key, DType::F32), -1.0)),
                    -1.0);
}

void bench_gdn2_core(const bench::LayerShape& shape, DType dtype, ops::GatedDelta2Kernels kernels,
                     std::vector<bench::Row>& rows) {
  const int64_t B = shape.batch, T = shape.seq, H = shape.heads, K = shape.head_dim, V = shape.head_dim;
  const double scale = 1.0 / std::sqrt(double(K));
  ag::NoGrad no_grad;
  const Tensor q = unit_heads({B, T, H, K}, 1, dtype), k = unit_heads({B, T, H, K}, 2, dtype),
               v = bench::normal_gpu({B, T, H, V}, 3, dtype), g = log_sigmoid_gpu({B, T, H, K}, 4),
               b = sigmoid_gpu({B, T, H, K}, 5), w = sigmoid_gpu({B, T, H, V}, 6),
               dout = bench::normal_gpu({B, T, H, V}, 7, dtype);
  const auto forward = [&] { ops::gated_delta_rule2(q, k, v, g, b, w, scale, Tensor(), nullptr, nullptr, kernels); };
  const auto backward = [&] {
    ops::gated_delta_rule2_backward(dout, q, k, v, g, b, w, scale, Tensor(), Tensor(), Tensor(), kernels);
  };
  const double fwd = bench::median_ms(forward), bwd = bench::median_ms(backward);
  const double train = bench::median_ms([&] {
    forward();
    backward();
  });
  const bool recurrent = kernels == ops::GatedDelta2Kernels::recurrent;
  const double fma = double(B * T * H) * double(K * V);  // state elements stepped
  const auto rate = [&](double ops_per_element, double ms) {
    return recurrent ? bench::fixed(2 * ops_per_element * fma / ms / 1e9, 1) : std::string();
  };
  const std::string what = std::string("GDN-2 core (") + (recurrent ? "recurrent" : "chunked") + "), " +
                           (dtype == DType::BF16 ? "bf16" : "f32") + " q/k/v";
  rows.push_back({{what + ", forward", shape.core(), bench::fixed(fwd, 3), rate(4, fwd)}});
  rows.push_back({{what + ", backward", shape.core(), bench::fixed(bwd, 3), rate(14, bwd)}});
  rows.push_back({{what + ", fwd + bwd", shape.core(), bench::fixed(train, 3), rate(18, train)}});
  if (recurrent) return;
  // As the autograd node runs them: the forward keeps its chunk scratch and the backward skips recomputing it.
  const double kept = bench::median_ms([&] {
    Tensor scratch;
    ops::gated_delta_rule2(q, k, v, g, b, w, scale, Tensor(), nullptr, &scratch, kernels);
    ops::gated_delta_rule2_backward(dout, q, k, v, g, b, w, scale, Tensor(), Tensor(), scratch, kernels);
  });
  rows.push_back({{what + ", fwd + bwd, scratch kept (training)", shape.core(), bench::fixed(kept, 3), ""}});
}

void bench_gdn_core(const bench::LayerShape& shape, std::vector<bench::Row>& rows) {
  const int64_t B = shape.batch, T = shape.seq, H = shape.heads, K = shape.head_dim, V = shape.head_dim;
  const double scale = 1.0 / std::sqrt(double(K));
  ag::NoGrad no_grad;
  const Tensor q = unit_heads({B, T, H, K}, 11, DType::BF16), k = unit_heads({B, T, H, K}, 12, DType::BF16),
               v = bench::normal_gpu({B, T, H, V}, 13, DType::BF16), beta = sigmoid_gpu({B, T, H}, 14),
               g = log_sigmoid_gpu({B, T, H}, 15), dout = bench::normal_gpu({B, T, H, V}, 16, DType::BF16);
  const double fwd = bench::median_ms([&] { ops::gated_delta_rule(q, k, v, g, beta, scale, Tensor(), nullptr); });
  const double train = bench::median_ms([&] {
    ops::gated_delta_rule(q, k, v, g, beta, scale, Tensor(), nullptr);
    ops::gated_delta_rule_backward(dout, q, k, v, g, beta, scale, Tensor(), Tensor());
  });
  rows.push_back({{"GDN core (chunked), bf16, forward", shape.core(), bench::fixed(fwd, 3), ""}});
  rows.push_back({{"GDN core (chunked), bf16, fwd + bwd", shape.core(), bench::fixed(train, 3), ""}});
}

}  // namespace

int main(int argc, char** argv) {
  bench::LayerShape shape;
  CLI::App app{"bench_gdn2: Gated DeltaNet-2's core and layer on CUDA, next to Gated DeltaNet's"};
  bench::add_layer_shape(app, shape);
  bench::parse_or_exit(app, argc, argv);
  PRIMER_CHECK(cuda::available(), "bench_gdn2 needs a CUDA device");
  std::printf("# GDN-2 vs GDN, %s, %s\n", bench::device_name().c_str(), bench::today().c_str());
  std::vector<bench::Row> rows;
  if (ops::gated_delta_rule2_token_dtype(Device::cuda(), DType::BF16, shape.head_dim, shape.head_dim, DType::F32) ==
      DType::BF16)  // the chunked kernels apply
    bench_gdn2_core(shape, DType::BF16, ops::GatedDelta2Kernels::chunked, rows);
  bench_gdn2_core(shape, DType::F32, ops::GatedDelta2Kernels::recurrent, rows);
  bench_gdn2_core(shape, DType::BF16, ops::GatedDelta2Kernels::recurrent, rows);
  bench_gdn_core(shape, rows);
  rows.push_back(bench::mixer_train_row<layers::Gdn2Mixer>(shape, "GDN-2", "model.layers.0.gdn2"));
  rows.push_back(bench::mixer_train_row<layers::GdnMixer>(shape, "GDN", "model.layers.0.gdn"));
  bench::print_table({"what", "shape", "ms", "TFLOP/s"}, rows);
  return 0;
}
