// Gated KalmaNet on the GPU, bf16, by default at B = 4, T = 4096, H = 16, D = 128 (the shape): the Chebyshev
// solve forward and forward + backward at num_iter r = 30, 10, 5; the core (solve, α-mix, GLA readout) forward +
// backward; the whole GKA layer forward + backward, by default at hidden 2048 (Hq = 16, Hk = 8). Each in the precise
// mode, the default (precise_iterate: the iterate as hi + lo operands, and q, k, v, x̂, q̃ and their gradients in f32,
// as the layer runs them; unlabelled rows), with the iteration's operands in fp16 instead ("fp16 operands" rows,
// iterate_fp16), and with one bf16 iterate and bf16 tensors ("bf16 iterate" rows).
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
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {
// The row label of a mode (the default, the precise mode with bf16 pairs, unlabelled).
std::string mode_label(bool precise, bool fp16) { return !precise ? ", bf16 iterate" : fp16 ? ", fp16 operands" : ""; }
}  // namespace

namespace {

constexpr int64_t kC = 64;  // the solve's chunk

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

double solve_forward_flops(double r, double D) { return (2 * r + 4) * D * D + (4 * r + 2) * kC * D; }
double solve_backward_flops(double r, double D) { return (2 * r + 16) * D * D + (4 * r + 24) * kC * D; }
double gla_forward_flops(double D) { return 4.0 * D * D + 4.0 * kC * D; }

#ifdef PRIMER_WITH_CUDA
// Where the solve's forward + backward spends its time, kernel by kernel (core/ops/cuda/chebyshev_solve.cu).
void kernel_breakdown(const bench::LayerShape& shape, const Tensor& q, const Tensor& k, const Tensor& gk,
                      const Tensor& dx, int64_t r, bool precise, bool fp16, std::vector<bench::Row>& rows) {
  const int64_t Dh = shape.head_dim;
  ops::ChebyshevDims d;
  d.batch = shape.batch;
  d.time = shape.seq;
  d.heads = shape.heads;
  d.dim = Dh;
  d.ridge = 0.02;
  d.num_iter = r;
  d.precise_iterate = precise;
  d.f16_operands = fp16;
  d.has_gk = true;
  const int64_t BH = shape.batch * shape.heads, N = d.chunks(), tiles = ops::cuda_ops::cheb::state_tiles(d);
  const Tensor states = Tensor::empty({BH * (N + 1) * Dh * Dh}, DType::F32, Device::cuda());
  const Tensor dstates = Tensor::empty({BH * N * Dh * Dh}, DType::F32, Device::cuda());
  const Tensor W = Tensor::empty({BH * N * kC}, DType::F32, Device::cuda());
  const Tensor u = Tensor::empty({BH * N * kC}, DType::F32, Device::cuda());
  const Tensor hdot = Tensor::empty({BH * N * tiles}, DType::F32, Device::cuda());
  // The precise mode's vectors and keys are f32, as the layer's.
  const DType io_dtype = precise ? DType::F32 : DType::BF16;
  const Tensor qv = q.to(io_dtype), dxv = dx.to(io_dtype), kv = k.to(io_dtype);
  const Tensor x = Tensor::empty(q.shape(), io_dtype, Device::cuda()),
               dq = Tensor::empty(q.shape(), io_dtype, Device::cuda());
  const Tensor dk = Tensor::empty(k.shape(), io_dtype, Device::cuda()),
               dgk = Tensor::empty(gk.shape(), DType::F32, Device::cuda());
  namespace cheb = ops::cuda_ops::cheb;
  const std::pair<std::string, std::function<void()>> kernels[] = {
      {"  kernel: chunk-start states",
       [&] {
         cheb::launch_chunk_states(d, io_dtype, kv.data_ptr(), gk.data<float>(), nullptr, states.data<float>(),
                                   nullptr);
       }},
      {"  kernel: iteration (forward)" + mode_label(precise, fp16),
       [&] {
         cheb::launch_iterate(d, io_dtype, qv.data_ptr(), kv.data_ptr(), gk.data<float>(), states.data<float>(),
                              x.data_ptr(), nullptr, nullptr, nullptr);
       }},
      {"  kernel: adjoint iteration + W, u" + mode_label(precise, fp16),
       [&] {
         cheb::launch_iterate(d, io_dtype, dxv.data_ptr(), kv.data_ptr(), gk.data<float>(), states.data<float>(),
                              dq.data_ptr(), x.data_ptr(), W.data<float>(), u.data<float>());
       }},
      {"  kernel: state-gradient scan",
       [&] {
         cheb::launch_state_gradients(d, io_dtype, dq.data_ptr(), x.data_ptr(), kv.data_ptr(), gk.data<float>(),
                                      W.data<float>(), states.data<float>(), nullptr, dstates.data<float>(),
                                      hdot.data<float>(), nullptr);
       }},
      {"  kernel: dk, dgk",
       [&] {
         cheb::launch_key_gradients(d, io_dtype, dq.data_ptr(), x.data_ptr(), kv.data_ptr(), gk.data<float>(),
                                    states.data<float>(), dstates.data<float>(), W.data<float>(), u.data<float>(),
                                    hdot.data<float>(), dk.data_ptr(), dgk.data<float>());
       }},
  };
  for (const auto& [name, fn] : kernels) {
    fn();  // inputs of the later kernels
    rows.push_back({{name, std::to_string(r), bench::fixed(bench::median_ms(fn), 3), "-"}});
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  bench::LayerShape shape;
  CLI::App app{"bench_gka: the Chebyshev solve, its kernels, the GKA core and layer on CUDA"};
  bench::add_layer_shape(app, shape);
  bench::parse_or_exit(app, argc, argv);
  PRIMER_CHECK(cuda::available(), "bench_gka needs a CUDA device");
  const int64_t B = shape.batch, T = shape.seq, H = shape.heads, Dh = shape.head_dim;
  std::printf("# Gated KalmaNet, bf16, %s, %s, %s\n", shape.core().c_str(), bench::device_name().c_str(),
              bench::today().c_str());
  const Shape heads{B, T, H, Dh};
  const Tensor q = unit_rows_gpu(heads, 1), k = unit_rows_gpu(heads, 2), v = random_gpu(heads, 3);
  const Tensor gk = decays_gpu({B, T, H}, 4);
  const Tensor dx = random_gpu(heads, 5), dout = random_gpu(heads, 6);
  const double tokens = double(B * T * H);  // head-tokens
  const double D = double(Dh), gla_flops = gla_forward_flops(D);

  std::vector<bench::Row> rows;
  auto add = [&](const std::string& what, int64_t r, double ms, double flops_per_head_token) {
    rows.push_back({{what, r >= 0 ? std::to_string(r) : "-", bench::fixed(ms, 3),
                     bench::fixed(flops_per_head_token * tokens / (ms * 1e-3) / 1e12, 1)}});
  };
  struct Mode {
    int64_t r;
    bool precise, fp16;
  };
  const Mode modes[] = {{30, true, false}, {30, true, true},   {30, false, false}, {10, true, false},
                        {10, true, true},  {10, false, false}, {5, true, false},   {5, true, true}};
  for (const Mode m : modes) {
    const int64_t r = m.r;
    const std::string mode = mode_label(m.precise, m.fp16);
    ops::ChebyshevOptions o;
    o.num_iter = r;
    o.precise_iterate = m.precise;
    o.f16_operands = m.fp16;
    const DType io = m.precise ? DType::F32 : DType::BF16;
    const Tensor qv = q.to(io), kv = k.to(io), vv = v.to(io), dxv = dx.to(io), doutv = dout.to(io);
    const double fwd = bench::median_ms([&] { ops::chebyshev_solve(qv, kv, gk, o, Tensor(), nullptr); });
    // As training runs it (ag::chebyshev_solve): the backward takes the forward's chunk-start states.
    const double train = bench::median_ms([&] {
      Tensor states;
      const Tensor x = ops::chebyshev_solve(qv, kv, gk, o, Tensor(), nullptr, &states);
      ops::chebyshev_solve_backward(dxv, x, qv, kv, gk, o, Tensor(), Tensor(), states);
    });
    const double core = bench::median_ms([&] {
      Tensor states;
      const Tensor x = ops::chebyshev_solve(qv, kv, gk, o, Tensor(), nullptr, &states);
      const Tensor o_gla = ops::gla(x, kv, vv, gk, 1.0 / std::sqrt(double(Dh)), Tensor(), nullptr);
      const ops::GlaGrads g = ops::gla_backward(doutv, x, kv, vv, gk, 1.0 / std::sqrt(double(Dh)), Tensor(), Tensor());
      ops::chebyshev_solve_backward(g.dq, x, qv, kv, gk, o, Tensor(), Tensor(), states);
    });
    add("solve fwd" + mode, r, fwd, solve_forward_flops(double(r), D));
    add("solve fwd+bwd" + mode, r, train, solve_forward_flops(double(r), D) + solve_backward_flops(double(r), D));
    add("core fwd+bwd (solve + GLA)" + mode, r, core,
        solve_forward_flops(double(r), D) + solve_backward_flops(double(r), D) + 3 * gla_flops);
  }
#ifdef PRIMER_WITH_CUDA
  for (const Mode m : modes)
    if (m.r != 10) kernel_breakdown(shape, q, k, gk, dx, m.r, m.precise, m.fp16, rows);
#endif
  const double gla = bench::median_ms([&] {
    ops::gla(q, k, v, gk, 1.0 / std::sqrt(double(Dh)), Tensor(), nullptr);
    ops::gla_backward(dout, q, k, v, gk, 1.0 / std::sqrt(double(Dh)), Tensor(), Tensor());
  });
  add("GLA readout fwd+bwd", -1, gla, 3 * gla_flops);

  // The whole layer with Qwen3-style GQA (by default hidden 2048, Hq = 16, Hk = 8), default flags.
  const Tensor x = random_gpu({B, T, shape.hidden}, 8);
  const Tensor dy = random_gpu({B, T, shape.hidden}, 9);
  for (const Mode m : modes) {
    ModelConfig c = shape.layer_config();
    c.gka.precise_iterate = m.precise;
    c.gka.iterate_fp16 = m.fp16;
    ParameterRegistry params;
    layers::GkaMixer mixer(c, "model.layers.0.gka", params);
    params.materialize(Device::cuda(), DType::BF16, 7);
    const int64_t r = m.r;
    mixer.set_num_iter(r);
    const double ms = bench::median_ms(
        [&] {
          ag::Var y = mixer.forward(ag::leaf(x), {});
          ag::backward(y, dy);
        },
        2, 10);
    rows.push_back({{"GKA layer fwd+bwd (hidden " + std::to_string(c.hidden_size) + ")" + mode_label(m.precise, m.fp16),
                     std::to_string(r), bench::fixed(ms, 3),
                     bench::fixed(3 * mixer.flops_per_token(T) * double(B * T) / (ms * 1e-3) / 1e12, 1)}});
  }
  bench::print_table({"part", "num_iter", "ms", "TFLOP/s"}, rows);
  return 0;
}
