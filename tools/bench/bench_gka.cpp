// Gated KalmaNet on the GPU, bf16, B = 4, T = 4096, H = 16, D = 128 (the shape): the Chebyshev solve
// forward and forward + backward at num_iter r = 30, 10, 5; the core (solve, α-mix, GLA readout) forward +
// backward; the whole GKA layer forward + backward at hidden 2048 (Hq = 16, Hk = 8).
// FLOPs count the useful matrix products at 2 per multiply-add, per head and token, with chunk C = 64:
//   solve forward   (2r + 4)D² + (4r + 2)CD       chunk-start states 2D², ‖H_c‖_F 2D² + 2CD, r matvecs 2D² + 4CD
//   solve backward  (2r + 16)D² + (4r + 24)CD     states and norms again, the adjoint solve, one matvec for the gate
//                                                 gradient, the state-gradient scan 4D², dk/dgk 8D² + 12CD
//   GLA readout     forward 4D² + 4CD, backward twice that
//   layer           3 x the mixer's forward FLOPs per token (GkaMixer::flops_per_token)
// The split-precision products of the kernels (H_0 as hi + lo bf16) execute more tensor-core work than counted.
#include <cmath>
#include <cstdio>
#include <functional>
#include <utility>
#include <span>
#include <string>

#include "core/autograd/functions.h"
#include "core/cuda_runtime.h"
#include "core/ops/chebyshev_solve.h"
#include "core/ops/cuda/chebyshev_solve_kernels.h"
#include "core/ops/gla.h"
#include "core/rng.h"
#include "layers/gka_mixer.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

constexpr int64_t kB = 4, kT = 4096, kH = 16, kD = 128, kC = 64;

Tensor random_gpu(const Shape& shape, uint64_t key) {
  Tensor t = Tensor::empty(shape, DType::BF16, Device::cuda());
  fill_normal(t, key, 0.0, 1.0);
  return t;
}

// Unit-norm rows (keys and queries per head, as the layer feeds the solve), drawn on the host.
Tensor unit_rows_gpu(const Shape& shape, uint64_t key) {
  Tensor t = Tensor::empty(shape, DType::F32);
  fill_normal(t, key, 0.0, 1.0);
  float* p = t.data<float>();
  const int64_t D = shape.back();
  for (int64_t r = 0; r < t.numel() / D; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += double(p[r * D + i]) * p[r * D + i];
    for (int64_t i = 0; i < D; ++i) p[r * D + i] = float(p[r * D + i] / std::sqrt(ss));
  }
  return t.to(DType::BF16).to(Device::cuda());
}

// Log decays −0.01 − 0.05·|N(0, 1)| (γ ≈ 0.95), f32 as the layer computes them.
Tensor decays_gpu(const Shape& shape, uint64_t key) {
  Tensor t = Tensor::empty(shape, DType::F32);
  fill_normal(t, key, 0.0, 1.0);
  for (float& g : std::span<float>(t.data<float>(), size_t(t.numel()))) g = -0.01f - 0.05f * std::abs(g);
  return t.to(Device::cuda());
}

std::string fixed(double v, int digits) {
  char s[32];
  std::snprintf(s, sizeof s, "%.*f", digits, v);
  return s;
}

double solve_forward_flops(double r) { return (2 * r + 4) * kD * kD + (4 * r + 2) * kC * kD; }
double solve_backward_flops(double r) { return (2 * r + 16) * kD * kD + (4 * r + 24) * kC * kD; }
constexpr double kGlaForwardFlops = 4.0 * kD * kD + 4.0 * kC * kD;

#ifdef PRIMER_WITH_CUDA
// Where the solve's forward + backward spends its time, kernel by kernel (core/ops/cuda/chebyshev_solve.cu).
void kernel_breakdown(const Tensor& q, const Tensor& k, const Tensor& gk, const Tensor& dx, int64_t r,
                      std::vector<bench::Row>& rows) {
  ops::ChebyshevDims d;
  d.batch = kB;
  d.time = kT;
  d.heads = kH;
  d.dim = kD;
  d.ridge = 0.02;
  d.num_iter = r;
  d.has_gk = true;
  const int64_t BH = kB * kH, N = d.chunks(), tiles = ops::cuda_ops::cheb::state_tiles(d);
  const Tensor states = Tensor::empty({BH * (N + 1) * kD * kD}, DType::F32, Device::cuda());
  const Tensor dstates = Tensor::empty({BH * N * kD * kD}, DType::F32, Device::cuda());
  const Tensor W = Tensor::empty({BH * N * kC}, DType::F32, Device::cuda());
  const Tensor u = Tensor::empty({BH * N * kC}, DType::F32, Device::cuda());
  const Tensor hdot = Tensor::empty({BH * N * tiles}, DType::F32, Device::cuda());
  const Tensor x = Tensor::empty(q.shape(), q.dtype(), Device::cuda()),
               dq = Tensor::empty(q.shape(), q.dtype(), Device::cuda());
  const Tensor dk = Tensor::empty(q.shape(), q.dtype(), Device::cuda()),
               dgk = Tensor::empty(gk.shape(), DType::F32, Device::cuda());
  namespace cheb = ops::cuda_ops::cheb;
  const std::pair<const char*, std::function<void()>> kernels[] = {
      {"  kernel: chunk-start states",
       [&] {
         cheb::launch_chunk_states(d, q.dtype(), k.data_ptr(), gk.data<float>(), nullptr, states.data<float>(),
                                   nullptr);
       }},
      {"  kernel: iteration (forward)",
       [&] {
         cheb::launch_iterate(d, q.dtype(), q.data_ptr(), k.data_ptr(), gk.data<float>(), states.data<float>(),
                              x.data_ptr(), nullptr, nullptr, nullptr);
       }},
      {"  kernel: adjoint iteration + W, u",
       [&] {
         cheb::launch_iterate(d, q.dtype(), dx.data_ptr(), k.data_ptr(), gk.data<float>(), states.data<float>(),
                              dq.data_ptr(), x.data_ptr(), W.data<float>(), u.data<float>());
       }},
      {"  kernel: state-gradient scan",
       [&] {
         cheb::launch_state_gradients(d, q.dtype(), dq.data_ptr(), x.data_ptr(), k.data_ptr(), gk.data<float>(),
                                      W.data<float>(), states.data<float>(), nullptr, dstates.data<float>(),
                                      hdot.data<float>(), nullptr);
       }},
      {"  kernel: dk, dgk",
       [&] {
         cheb::launch_key_gradients(d, q.dtype(), dq.data_ptr(), x.data_ptr(), k.data_ptr(), gk.data<float>(),
                                    states.data<float>(), dstates.data<float>(), W.data<float>(), u.data<float>(),
                                    hdot.data<float>(), dk.data_ptr(), dgk.data<float>());
       }},
  };
  for (const auto& [name, fn] : kernels) {
    fn();  // inputs of the later kernels
    rows.push_back({{name, std::to_string(r), fixed(bench::median_ms(fn), 3), "-"}});
  }
}
#endif

}  // namespace

int main() {
  PRIMER_CHECK(cuda::available(), "bench_gka needs a CUDA device");
  std::printf("# Gated KalmaNet, bf16, B = %ld, T = %ld, H = %ld, D = %ld, %s, %s\n", long(kB), long(kT), long(kH),
              long(kD), bench::device_name().c_str(), bench::today().c_str());
  const Shape shape{kB, kT, kH, kD};
  const Tensor q = unit_rows_gpu(shape, 1), k = unit_rows_gpu(shape, 2), v = random_gpu(shape, 3);
  const Tensor gk = decays_gpu({kB, kT, kH}, 4);
  const Tensor dx = random_gpu(shape, 5), dout = random_gpu(shape, 6);
  const double tokens = double(kB * kT * kH);  // head-tokens

  std::vector<bench::Row> rows;
  auto add = [&](const std::string& what, int64_t r, double ms, double flops_per_head_token) {
    rows.push_back({{what, r >= 0 ? std::to_string(r) : "-", fixed(ms, 3),
                     fixed(flops_per_head_token * tokens / (ms * 1e-3) / 1e12, 1)}});
  };
  for (int64_t r : {30, 10, 5}) {
    ops::ChebyshevOptions o;
    o.num_iter = r;
    const double fwd = bench::median_ms([&] { ops::chebyshev_solve(q, k, gk, o, Tensor(), nullptr); });
    const double train = bench::median_ms([&] {
      const Tensor x = ops::chebyshev_solve(q, k, gk, o, Tensor(), nullptr);
      ops::chebyshev_solve_backward(dx, x, q, k, gk, o, Tensor(), Tensor());
    });
    const double core = bench::median_ms([&] {
      const Tensor x = ops::chebyshev_solve(q, k, gk, o, Tensor(), nullptr);
      const Tensor o_gla = ops::gla(x, k, v, gk, 1.0 / std::sqrt(double(kD)), Tensor(), nullptr);
      const ops::GlaGrads g = ops::gla_backward(dout, x, k, v, gk, 1.0 / std::sqrt(double(kD)), Tensor(), Tensor());
      ops::chebyshev_solve_backward(g.dq, x, q, k, gk, o, Tensor(), Tensor());
    });
    add("solve fwd", r, fwd, solve_forward_flops(double(r)));
    add("solve fwd+bwd", r, train, solve_forward_flops(double(r)) + solve_backward_flops(double(r)));
    add("core fwd+bwd (solve + GLA)", r, core,
        solve_forward_flops(double(r)) + solve_backward_flops(double(r)) + 3 * kGlaForwardFlops);
  }
#ifdef PRIMER_WITH_CUDA
  for (int64_t r : {30, 5}) kernel_breakdown(q, k, gk, dx, r, rows);
#endif
  const double gla = bench::median_ms([&] {
    ops::gla(q, k, v, gk, 1.0 / std::sqrt(double(kD)), Tensor(), nullptr);
    ops::gla_backward(dout, q, k, v, gk, 1.0 / std::sqrt(double(kD)), Tensor(), Tensor());
  });
  add("GLA readout fwd+bwd", -1, gla, 3 * kGlaForwardFlops);

  // The whole layer at hidden 2048 with Qwen3-style GQA (Hq = 16, Hk = 8), default flags.
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 16;
  c.hidden_size = 2048;
  c.intermediate_size = 4096;
  c.num_hidden_layers = 1;
  c.num_attention_heads = kH;
  c.num_key_value_heads = kH / 2;
  c.head_dim = kD;
  c.max_position_embeddings = kT;
  ParameterRegistry params;
  layers::GkaMixer mixer(c, "model.layers.0.gka", params);
  params.materialize(Device::cuda(), DType::BF16, 7);
  const Tensor x = random_gpu({kB, kT, c.hidden_size}, 8);
  const Tensor dy = random_gpu({kB, kT, c.hidden_size}, 9);
  for (int64_t r : {30, 10, 5}) {
    mixer.set_num_iter(r);
    const double ms = bench::median_ms(
        [&] {
          ag::Var y = mixer.forward(ag::leaf(x), {});
          ag::backward(y, dy);
        },
        2, 10);
    rows.push_back({{"GKA layer fwd+bwd (hidden 2048)", std::to_string(r), fixed(ms, 3),
                     fixed(3 * mixer.flops_per_token(kT) * double(kB * kT) / (ms * 1e-3) / 1e12, 1)}});
  }
  bench::print_table({"part", "num_iter", "ms", "TFLOP/s"}, rows);
  return 0;
}
