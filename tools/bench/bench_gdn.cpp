// Gated DeltaNet on CUDA. (1) The gated delta rule core at B = 4, T = 4096, H = 16, K = V = 128 (16k tokens × 16
// heads, flash-linear-attention's benchmark shape), bf16 q/k/v, f32 g/β, forward and forward + backward.
// (2) The whole GDN layer at hidden 2048 (Hq = 16, Hk = 8, head_dim 128, short convolutions, output gate) on the
// same 16k tokens, forward + backward (projections, convolutions, norms, core, every gradient); its FLOPs are 3× the
// projections' and convolutions' plus the core's forward and backward.
// Inputs are realistic: q, k L2-normalised per head, β = σ(z), g = log σ(z).
// FLOPs of the core count its matrix products per token and head (layers::GdnMixer::core_forward_flops,
// core_backward_flops: 2C(3K + 2V) + 6KV forward; the backward as our kernels run it, recomputation included).
// GB/s counts the compulsory traffic: the forward reads q, k, v, g, β and writes o; the backward also reads dout and
// writes dq, dk, dv, dg, dβ.
#include <cmath>
#include <cstdio>
#include <string>

#include "core/autograd/functions.h"
#include "core/cuda_runtime.h"
#include "core/ops/elementwise.h"
#include "core/ops/gated_delta_rule.h"
#include "core/rng.h"
#include "layers/gdn_mixer.h"
#include "layers/ssm_blocks.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

Tensor normal_gpu(const Shape& shape, uint64_t key, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda());
  fill_normal(t, key, 0.0, 1.0);
  return t;
}

std::string fixed(double v, int digits) {
  char s[32];
  std::snprintf(s, sizeof s, "%.*f", digits, v);
  return s;
}

void bench_core(std::vector<bench::Row>& rows) {
  const int64_t B = 4, T = 4096, H = 16, K = 128, V = 128;
  ag::NoGrad no_grad;
  const Tensor q = layers::l2_normalize(ag::constant(normal_gpu({B, T, H, K}, 1, DType::BF16)), 1e-6)->value;
  const Tensor k = layers::l2_normalize(ag::constant(normal_gpu({B, T, H, K}, 2, DType::BF16)), 1e-6)->value;
  const Tensor v = normal_gpu({B, T, H, V}, 3, DType::BF16);
  const Tensor beta = ops::unary(ops::Unary::Sigmoid, normal_gpu({B, T, H}, 4, DType::F32));
  // log σ(z) = −softplus(−z)
  const Tensor g =
      ops::scale(ops::unary(ops::Unary::Softplus, ops::scale(normal_gpu({B, T, H}, 5, DType::F32), -1.0)), -1.0);
  const Tensor dout = normal_gpu({B, T, H, V}, 6, DType::BF16);
  const double scale = 1.0 / std::sqrt(double(K));

  const double n = double(B * T * H);
  const double fwd_flops = n * layers::GdnMixer::core_forward_flops(K, V);
  const double bwd_flops = n * layers::GdnMixer::core_backward_flops(K, V);
  const double io_fwd = n * (2.0 * (2 * K + 2 * V) + 2 * 4.0);        // q, k, v, o bf16; g, β f32
  const double io_bwd = n * (2.0 * (2 * K + 2 * V) * 2 + 4 * 4.0);    // + dout, dq, dk, dv; dg, dβ
  Tensor state;
  const double fwd_ms = bench::median_ms([&] { ops::gated_delta_rule(q, k, v, g, beta, scale, Tensor(), &state); });
  const double train_ms = bench::median_ms([&] {
    ops::gated_delta_rule(q, k, v, g, beta, scale, Tensor(), &state);
    ops::gated_delta_rule_backward(dout, q, k, v, g, beta, scale, Tensor(), Tensor());
  });
  const std::string shape = "B=4 T=4096 H=16 K=V=128";
  for (auto [pass, ms, flops, bytes] : {std::tuple{"core fwd", fwd_ms, fwd_flops, io_fwd},
                                       std::tuple{"core fwd+bwd", train_ms, fwd_flops + bwd_flops, io_fwd + io_bwd}})
    rows.push_back({{pass, shape, fixed(ms, 3), fixed(flops / (ms * 1e-3) / 1e12, 1),
                     fixed(bytes / (ms * 1e-3) / 1e9, 0)}});
}

void bench_layer(std::vector<bench::Row>& rows) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 1024;
  c.hidden_size = 2048;
  c.intermediate_size = 6144;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 4096;
  const int64_t B = 4, T = 4096;
  ParameterRegistry params;
  layers::GdnMixer mixer(c, "model.layers.0.gdn", params);
  params.materialize(Device::cuda(), DType::BF16, 7);
  const Tensor x = normal_gpu({B, T, c.hidden_size}, 8, DType::BF16);
  const Tensor dy = normal_gpu({B, T, c.hidden_size}, 9, DType::BF16);
  const double ms = bench::median_ms([&] {
    const ag::Var y = mixer.forward(ag::leaf(x), {});
    y->grad = dy;
    ag::current_tape().backward();
  });
  // Projections and convolutions: forward + 2× for their backward; the core: its forward and backward as counted.
  const double core_fwd = 16 * layers::GdnMixer::core_forward_flops(128, 128);
  const double core_bwd = 16 * layers::GdnMixer::core_backward_flops(128, 128);
  const double flops = double(B * T) * (3.0 * (mixer.flops_per_token(T) - core_fwd) + core_fwd + core_bwd);
  rows.push_back({{"GDN layer fwd+bwd", "B=4 T=4096 d=2048 Hq=16 Hk=8 D=128", fixed(ms, 3),
                   fixed(flops / (ms * 1e-3) / 1e12, 1), "-"}});
}

}  // namespace

int main() {
  PRIMER_CHECK(cuda::available(), "bench_gdn needs a CUDA device");
  std::printf("# Gated DeltaNet, bf16, %s, %s\n", bench::device_name().c_str(), bench::today().c_str());
  std::vector<bench::Row> rows;
  bench_core(rows);
  bench_layer(rows);
  bench::print_table({"pass", "shape", "ms", "TFLOP/s", "GB/s"}, rows);
  return 0;
}
