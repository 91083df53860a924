// Gated DeltaNet on CUDA. (1) The gated delta rule core, by default at B = 4, T = 4096, H = 16, K = V = 128 (16k
// tokens × 16 heads, flash-linear-attention's benchmark shape), bf16 q/k/v, f32 g/β, forward and forward + backward.
// (2) The whole GDN layer, by default at hidden 2048 (Hq = 16, Hk = 8, head_dim 128, short convolutions, output
// gate) on the same tokens, forward + backward (projections, convolutions, norms, core, every gradient); its FLOPs are
// 3× the projections' and convolutions' plus the core's forward and backward. Inputs are realistic: q, k L2-normalised
// per head, β = σ(z), g = log σ(z). FLOPs of the core count its matrix products per token and head
// (layers::GdnMixer::core_forward_flops, core_backward_flops: 2C(3K + 2V) + 6KV forward; the backward as our kernels
// run it, recomputation included). GB/s counts the compulsory traffic: the forward reads q, k, v, g, β and writes o;
// the backward also reads dout and writes dq, dk, dv, dg, dβ. (3) Each kernel of the core's forward and backward on its
// own, for each value block of the sequential passes (32, 64 or 128 value columns per CTA), through the CUDA launchers.
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "core/autograd/functions.h"
#include "core/cuda_runtime.h"
#include "core/ops/elementwise.h"
#include "core/ops/gated_delta_rule.h"
#include "core/rng.h"
#ifdef PRIMER_WITH_CUDA
#include "core/ops/cuda/gated_delta_rule.h"
#endif
#include "layers/gdn_mixer.h"
#include "layers/ssm_blocks.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

struct CoreInputs {
  int64_t B, T, H, K, V;
  Tensor q, k, v, g, beta, dout;
  double scale;
  explicit CoreInputs(const bench::LayerShape& s)
      : B(s.batch), T(s.seq), H(s.heads), K(s.head_dim), V(s.head_dim), scale(1.0 / std::sqrt(double(s.head_dim))) {
    ag::NoGrad no_grad;
    q = layers::l2_normalize(ag::constant(bench::normal_gpu({B, T, H, K}, 1, DType::BF16)), 1e-6)->value;
    k = layers::l2_normalize(ag::constant(bench::normal_gpu({B, T, H, K}, 2, DType::BF16)), 1e-6)->value;
    v = bench::normal_gpu({B, T, H, V}, 3, DType::BF16);
    beta = ops::unary(ops::Unary::Sigmoid, bench::normal_gpu({B, T, H}, 4, DType::F32));
    // log σ(z) = −softplus(−z)
    g = ops::scale(ops::unary(ops::Unary::Softplus, ops::scale(bench::normal_gpu({B, T, H}, 5, DType::F32), -1.0)),
                   -1.0);
    dout = bench::normal_gpu({B, T, H, V}, 6, DType::BF16);
  }
  double tokens_heads() const { return double(B * T * H); }
};

void bench_core(const CoreInputs& in, const std::string& shape, std::vector<bench::Row>& rows) {
  const double n = in.tokens_heads();
  const double fwd_flops = n * layers::GdnMixer::core_forward_flops(in.K, in.V);
  const double bwd_flops = n * layers::GdnMixer::core_backward_flops(in.K, in.V);
  const double io_fwd = n * (2.0 * (2 * in.K + 2 * in.V) + 2 * 4.0);      // q, k, v, o bf16; g, β f32
  const double io_bwd = n * (2.0 * (2 * in.K + 2 * in.V) * 2 + 4 * 4.0);  // + dout, dq, dk, dv; dg, dβ
  Tensor state;
  const double fwd_ms =
      bench::median_ms([&] { ops::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, in.scale, Tensor(), &state); });
  const double train_ms = bench::median_ms([&] {
    ops::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, in.scale, Tensor(), &state);
    ops::gated_delta_rule_backward(in.dout, in.q, in.k, in.v, in.g, in.beta, in.scale, Tensor(), Tensor());
  });
  for (auto [pass, ms, flops, bytes] : {std::tuple{"core fwd", fwd_ms, fwd_flops, io_fwd},
                                        std::tuple{"core fwd+bwd", train_ms, fwd_flops + bwd_flops, io_fwd + io_bwd}})
    rows.push_back({{pass, shape, bench::fixed(ms, 3), bench::fixed(flops / (ms * 1e-3) / 1e12, 1),
                     bench::fixed(bytes / (ms * 1e-3) / 1e9, 0)}});
}

#ifdef PRIMER_WITH_CUDA
// Every kernel of the core on its own (after one full run has filled the scratch it reads), per value block; at value
// block 32 also with the forward in one piece (its prep before its pass, not beside it: GatedDeltaConfig).
void bench_kernels(const CoreInputs& in, const std::string& shape) {
  const ops::GatedDeltaDims d{in.B, in.T, in.H, in.K, in.V, in.scale};
  const Tensor ws =
      Tensor::empty({int64_t(ops::cuda_ops::gated_delta_rule_workspace_bytes(d, true))}, DType::U8, Device::cuda());
  const Tensor o = Tensor::empty(in.v.shape(), DType::BF16, Device::cuda());
  const Tensor dq = Tensor::empty(in.q.shape(), DType::BF16, Device::cuda());
  const Tensor dk = Tensor::empty(in.k.shape(), DType::BF16, Device::cuda());
  const Tensor dv = Tensor::empty(in.v.shape(), DType::BF16, Device::cuda());
  const Tensor dg = Tensor::empty(in.g.shape(), DType::F32, Device::cuda());
  const Tensor db = Tensor::empty(in.g.shape(), DType::F32, Device::cuda());
  const Tensor st = Tensor::empty({in.B, in.H, in.K, in.V}, DType::F32, Device::cuda());
  std::vector<bench::Row> rows;
  for (const auto& [value_block, pieces] : {std::pair{32, 0}, std::pair{32, 1}, std::pair{64, 0}, std::pair{128, 0}}) {
    ops::cuda_ops::GatedDeltaConfig config{value_block};
    config.forward_pieces = pieces;
    const auto fwd = ops::cuda_ops::gated_delta_rule_forward_kernels(
        d, in.q.data_ptr(), in.k.data_ptr(), in.v.data_ptr(), in.g.data<float>(), in.beta.data<float>(), nullptr,
        o.data_ptr(), st.data<float>(), ws.data_ptr(), config);
    const auto bwd = ops::cuda_ops::gated_delta_rule_backward_kernels(
        d, in.dout.data_ptr(), in.q.data_ptr(), in.k.data_ptr(), in.v.data_ptr(), in.g.data<float>(),
        in.beta.data<float>(), nullptr, nullptr, dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), dg.data<float>(),
        db.data<float>(), nullptr, ws.data_ptr(), config);
    const double fwd_ms = bench::median_ms([&] {
      for (const auto& kernel : fwd) kernel.launch();
    });
    const double train_ms = bench::median_ms([&] {
      for (const auto& kernel : fwd) kernel.launch();
      for (const auto& kernel : bwd) kernel.launch();
    });
    const std::string vb = "value block " + std::to_string(value_block) + (pieces == 1 ? ", one forward piece" : "");
    rows.push_back({{vb, "forward", bench::fixed(fwd_ms, 3), "100"}});
    for (const auto& kernel : fwd) {
      const double ms = bench::median_ms(kernel.launch);
      rows.push_back({{vb, std::string("  ") + kernel.name, bench::fixed(ms, 3), bench::fixed(100 * ms / fwd_ms, 0)}});
    }
    rows.push_back({{vb, "forward + backward", bench::fixed(train_ms, 3), "100"}});
    for (const auto& kernel : bwd) {
      const double ms = bench::median_ms(kernel.launch);
      rows.push_back(
          {{vb, std::string("  backward ") + kernel.name, bench::fixed(ms, 3), bench::fixed(100 * ms / train_ms, 0)}});
    }
  }
  std::printf("\n# core kernels, %s (launchers, no allocation)\n", shape.c_str());
  bench::print_table({"config", "kernel", "ms", "% of pass"}, rows);
}
#endif

void bench_layer(const bench::LayerShape& shape, std::vector<bench::Row>& rows) {
  const ModelConfig c = shape.layer_config();
  const int64_t B = shape.batch, T = shape.seq;
  ParameterRegistry params;
  layers::GdnMixer mixer(c, "model.layers.0.gdn", params);
  params.materialize(Device::cuda(), DType::BF16, 7);
  const Tensor x = bench::normal_gpu({B, T, c.hidden_size}, 8, DType::BF16);
  const Tensor dy = bench::normal_gpu({B, T, c.hidden_size}, 9, DType::BF16);
  const double fwd_ms = bench::median_ms([&] {
    ag::NoGrad no_grad;
    mixer.forward(ag::constant(x), {});
  });
  const double ms = bench::median_ms([&] {
    const ag::Var y = mixer.forward(ag::leaf(x), {});
    y->grad = dy;
    ag::current_tape().backward();
  });
  // Projections and convolutions: forward + 2× for their backward; the core: its forward and backward as counted.
  const double core_fwd = double(shape.heads) * layers::GdnMixer::core_forward_flops(shape.head_dim, shape.head_dim);
  const double core_bwd = double(shape.heads) * layers::GdnMixer::core_backward_flops(shape.head_dim, shape.head_dim);
  const double flops = double(B * T) * (3.0 * (mixer.flops_per_token(T) - core_fwd) + core_fwd + core_bwd);
  const double fwd_flops = double(B * T) * mixer.flops_per_token(T);
  rows.push_back({{"GDN layer fwd", shape.layer(), bench::fixed(fwd_ms, 3),
                   bench::fixed(fwd_flops / (fwd_ms * 1e-3) / 1e12, 1), "-"}});
  rows.push_back(
      {{"GDN layer fwd+bwd", shape.layer(), bench::fixed(ms, 3), bench::fixed(flops / (ms * 1e-3) / 1e12, 1), "-"}});
}

}  // namespace

int main(int argc, char** argv) {
  bench::LayerShape shape;
  CLI::App app{"bench_gdn: the gated delta rule core, its kernels and the GDN layer on CUDA"};
  bench::add_layer_shape(app, shape);
  bench::parse_or_exit(app, argc, argv);
  PRIMER_CHECK(cuda::available(), "bench_gdn needs a CUDA device");
  std::printf("# Gated DeltaNet, bf16, %s, %s\n", bench::device_name().c_str(), bench::today().c_str());
  std::vector<bench::Row> rows;
  {
    const CoreInputs core(shape);
    bench_core(core, shape.core(), rows);
#ifdef PRIMER_WITH_CUDA
    bench_kernels(core, shape.core());
#endif
  }
  bench_layer(shape, rows);
  std::printf("\n# core (ops API, allocations included) and layer\n");
  bench::print_table({"pass", "shape", "ms", "TFLOP/s", "GB/s"}, rows);
  return 0;
}
