// Scalar-gated linear attention (the SSD core of Mamba-2) and the whole Mamba-2 layer, bf16, on the GPU.
// Core, by default at B = 4, T = 4096, H = 16, K = V = 128: scale 1, no initial state: forward, backward and forward +
// backward, plus a breakdown into the sequential state pass (one scan in the forward, two in one launch in the
// backward) and the parallel chunk kernels. FLOPs are those of the chunked algorithm as it runs (chunk C = 64, per
// chunk and head, 2 FLOPs per multiply-add, intra-chunk products counted for their causal half):
//   forward  2CKV (state update Kᵀ·V) + 2CKV (Q·S) + C²K (Q Kᵀ) + C²V (P·V)                   = 4CKV + C²(K + V)
//   backward 4CKV (both scans) + C²K + C²V (A, dA) + 2CKV + C²K (dq) + 2CKV + C²K (dk) + 2CKV + C²V (dv)
//            = 10CKV + 3C²K + 2C²V
// GB/s counts each input and output of the op once (q, k, v, g, o; dout, q, k, v, g → dq, dk, dv, dg), not the
// bf16 chunk-boundary states the kernels write and read back. One row runs the core in f32, as Gated KalmaNet's
// precise mode does (a precise query: core/ops/cuda/gla.h).
// Layer: the Mamba-2 mixer, by default at hidden 2048 (Hq = 16, Hkv = 8, head_dim 128), on the same B·T tokens,
// forward and forward + backward through the tape, TFLOP/s from the mixer's flops_per_token (forward; ×3 for fwd +
// bwd).
#include <cmath>
#include <cstdio>
#include <string>

#include "core/autograd/functions.h"
#include "core/cuda_runtime.h"
#include "core/ops/cuda/gla_scan.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/ops/gla.h"
#include "core/rng.h"
#include "layers/mamba2_mixer.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

constexpr int64_t kC = 64;  // the chunk

Tensor random_gpu(const Shape& shape, uint64_t key, DType dtype = DType::BF16, double lo = 0, double hi = 0) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda());
  if (lo < hi)
    fill_uniform(t, key, lo, hi);
  else
    fill_normal(t, key, 0.0, 1.0);
  return t;
}

bench::Row row(const std::string& what, double ms, double flops, double bytes) {
  return {{what, bench::fixed(ms, 3), flops > 0 ? bench::fixed(flops / (ms * 1e-3) / 1e12, 1) : "",
           bytes > 0 ? bench::fixed(bytes / (ms * 1e-3) / 1e9, 0) : ""}};
}

}  // namespace

int main(int argc, char** argv) {
  bench::LayerShape shape;
  CLI::App app{"bench_gla: the GLA core (Mamba-2's SSD), its state passes and the Mamba-2 layer on CUDA"};
  bench::add_layer_shape(app, shape);
  bench::parse_or_exit(app, argc, argv);
  PRIMER_CHECK(cuda::available(), "bench_gla needs a CUDA device");
  const int64_t B = shape.batch, T = shape.seq, H = shape.heads, Dh = shape.head_dim;
  std::printf("# GLA / Mamba-2, bf16, %s, %s, %s\n", shape.core().c_str(), bench::device_name().c_str(),
              bench::today().c_str());
  const Shape heads{B, T, H, Dh};
  const Tensor q = random_gpu(heads, 1), v = random_gpu(heads, 3), dout = random_gpu(heads, 4);
  const Tensor k = ops::scale(random_gpu(heads, 2), 1.0 / std::sqrt(double(Dh)));  // keys of about unit norm
  const Tensor g = random_gpu({B, T, H}, 5, DType::F32, -1.0, 0.0);

  const double chunk_heads = double(B * T / kC * H), CKV = double(kC * Dh * Dh), CCK = double(kC * kC * Dh);
  const double fwd_flops = chunk_heads * (4 * CKV + 2 * CCK), bwd_flops = chunk_heads * (10 * CKV + 5 * CCK);
  const double act = double(B * T * H * Dh) * 2, gate = double(B * T * H) * 4;
  const double fwd_bytes = 4 * act + gate, bwd_bytes = 7 * act + 2 * gate;

  Tensor o;
  ops::GlaGrads grads;
  const double fwd_ms = bench::median_ms([&] { o = ops::gla(q, k, v, g, 1.0, Tensor(), nullptr); });
  const double bwd_ms = bench::median_ms([&] { grads = ops::gla_backward(dout, q, k, v, g, 1.0, Tensor(), Tensor()); });
  const double train_ms = bench::median_ms([&] {
    o = ops::gla(q, k, v, g, 1.0, Tensor(), nullptr);
    grads = ops::gla_backward(dout, q, k, v, g, 1.0, Tensor(), Tensor());
  });

  // In f32 (GKA's precise mode): q, the chunk states and their gradients as hi + lo operands, f32 I/O.
  const Tensor q32 = q.to(DType::F32), k32 = k.to(DType::F32), v32 = v.to(DType::F32), dout32 = dout.to(DType::F32);
  const double precise_ms = bench::median_ms([&] {
    ops::gla(q32, k32, v32, g, 1.0, Tensor(), nullptr);
    ops::gla_backward(dout32, q32, k32, v32, g, 1.0, Tensor(), Tensor());
  });

  std::vector<bench::Row> rows;
  rows.push_back(row("core forward", fwd_ms, fwd_flops, fwd_bytes));
  rows.push_back(row("core backward", bwd_ms, bwd_flops, bwd_bytes));
  rows.push_back(row("core forward + backward", train_ms, fwd_flops + bwd_flops, fwd_bytes + bwd_bytes));
  rows.push_back(row("core forward + backward, f32 (precise query)", precise_ms, fwd_flops + bwd_flops,
                     2 * (fwd_bytes + bwd_bytes)));
#ifdef PRIMER_WITH_CUDA
  // The sequential passes alone (their launcher is internal to the op; called here for the breakdown).
  const ops::GlaDims d{B, T, H, Dh, Dh};
  Tensor states = Tensor::empty({2 * B * H * (T / kC) * Dh * Dh}, DType::BF16, Device::cuda());
  const ops::cuda_ops::GlaScanJob jobs[2] = {
      {k.data_ptr(), v.data_ptr(), nullptr, states.data_ptr(), nullptr, false},
      {q.data_ptr(), dout.data_ptr(), nullptr, static_cast<char*>(states.data_ptr()) + states.nbytes() / 2, nullptr,
       true}};
  const double scan1_ms = bench::median_ms([&] { ops::cuda_ops::gla_state_scans(d, g.data<float>(), 1.0f, jobs, 1); });
  const double scan2_ms = bench::median_ms([&] { ops::cuda_ops::gla_state_scans(d, g.data<float>(), 1.0f, jobs, 2); });

  rows.push_back(row("  state pass, forward (1 scan)", scan1_ms, chunk_heads * 2 * CKV, 0));
  rows.push_back(row("  output kernel (forward − scan)", fwd_ms - scan1_ms, chunk_heads * (2 * CKV + 2 * CCK), 0));
  rows.push_back(row("  state passes, backward (2 scans)", scan2_ms, chunk_heads * 4 * CKV, 0));
  rows.push_back(row("  gradient kernel (backward − scans)", bwd_ms - scan2_ms, chunk_heads * (6 * CKV + 5 * CCK), 0));
#endif

  // The whole Mamba-2 layer.
  const ModelConfig c = shape.layer_config();
  ParameterRegistry params;
  layers::Mamba2Mixer mixer(c, "model.layers.0.mamba", params);
  params.materialize(Device::cuda(), DType::BF16, 7);
  const Tensor x = random_gpu({B, T, c.hidden_size}, 8), dy = random_gpu({B, T, c.hidden_size}, 9);
  const layers::MixerContext ctx;
  const double layer_flops = mixer.flops_per_token(T) * double(B * T);
  const double layer_fwd_ms = bench::median_ms([&] {
    ag::NoGrad no_grad;
    mixer.forward(ag::constant(x), ctx);
  });
  const double layer_train_ms = bench::median_ms([&] {
    const ag::Var xin = ag::leaf(x);
    const ag::Var y = mixer.forward(xin, ctx);
    y->grad = dy;
    ag::current_tape().backward();
  });
  // Its two projections alone (forward and both backward GEMMs), to separate GEMM time from the rest of the layer.
  const Tensor& w_in = params.get("model.layers.0.mamba.in_proj.weight").var->value;
  const Tensor& w_out = params.get("model.layers.0.mamba.out_proj.weight").var->value;
  const Tensor hidden = random_gpu({B, T, w_out.size(1)}, 10);
  const Tensor dw_in = Tensor::zeros(w_in.shape(), DType::F32, Device::cuda());
  const Tensor dw_out = Tensor::zeros(w_out.shape(), DType::F32, Device::cuda());
  const double gemm_ms = bench::median_ms([&] {
    Tensor dx, dh;
    const Tensor proj = ops::linear(x, w_in);
    ops::linear(hidden, w_out);
    ops::linear_backward(proj, x, w_in, &dx, dw_in);
    ops::linear_backward(dy, hidden, w_out, &dh, dw_out);
  });
  const double gemm_flops = 6.0 * double(B * T) * double(w_in.numel() + w_out.numel());
  rows.push_back(row("Mamba-2 layer forward", layer_fwd_ms, layer_flops, 0));
  rows.push_back(row("Mamba-2 layer forward + backward", layer_train_ms, 3 * layer_flops, 0));
  rows.push_back(row("  its in_proj + out_proj GEMMs, fwd + bwd", gemm_ms, gemm_flops, 0));

  bench::print_table({"what", "ms", "TFLOP/s", "GB/s"}, rows);
  std::printf("copy ceiling: %.0f GB/s (read + write)\n", bench::measure_copy_gbps());
  return 0;
}
