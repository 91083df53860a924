// B'MOJO-F on CUDA against the attention kernels it runs on (issue target: its sliding-window part at the kernels'
// windowed throughput), by default at B = 4, T = 4096, Hq = 16, Hkv = 8, head_dim 128, bf16, window W = 1024
// (--window): forward and forward + backward of one windowed attention (ag::attention: SWA's call) and of B'MOJO-F's
// merged attention over its two windows (ag::merged_attention: in-context keys (p − W, p], fading keys (p − 2W, p − W],
// one fused kernel each way on Hopper), next to the unfused path (two flash attentions and the log-sum-exp merge) and
// to one window of 2W (the same pairs over one key set). TFLOP/s count only the visible (query, key) pairs, as
// bench_attention does: forward 4·head_dim FLOPs per pair and head, forward + backward 3.5× that. Then the whole
// layers at hidden 2048: B'MOJO-F (its SSM: --ssm, default mamba2), that SSM's own layer and an SWA layer of the same
// window, forward + backward.
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "core/autograd/functions.h"
#include "core/autograd/merged_attention.h"
#include "core/ops/attention.h"
#include "core/ops/elementwise.h"
#include "core/ops/lse_merge.h"
#include "core/cuda_runtime.h"
#include "core/rng.h"
#include "layers/hybrid_config.h"
#include "layers/mixer_factory.h"
#include "layers/model_config.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

// Visible (query, key) pairs of one row: in-context keys (p − W, p], fading keys (p − 2W, p − W].
double pairs(int64_t T, int64_t W, bool fading) {
  double n = 0;
  for (int64_t p = 0; p < T; ++p)
    n += fading ? double(std::clamp<int64_t>(p - W + 1, 0, W)) : double(std::min(p + 1, W));
  return n;
}

void bench_attention_parts(const bench::LayerShape& s, int64_t W, std::vector<bench::Row>& rows) {
  const int64_t B = s.batch, T = s.seq, Hq = s.heads, Hkv = s.kv_heads, D = s.head_dim;
  const Tensor q = bench::normal_gpu({B, T, Hq, D}, 1, DType::BF16),
               k = bench::normal_gpu({B, T, Hkv, D}, 2, DType::BF16),
               v = bench::normal_gpu({B, T, Hkv, D}, 3, DType::BF16),
               k_f = bench::normal_gpu({B, T, Hkv, D}, 4, DType::BF16),
               v_f = bench::normal_gpu({B, T, Hkv, D}, 5, DType::BF16),
               dout = bench::normal_gpu({B, T, Hq, D}, 6, DType::BF16);
  ops::AttentionOptions here;
  here.window = W;
  ops::AttentionOptions fading = here;
  fading.k_offset = W;  // fading keys W positions later under the same window
  const double per_pair = 4.0 * double(B * Hq * D);
  const double window_flops = per_pair * pairs(T, W, false), both_flops = window_flops + per_pair * pairs(T, W, true);
  const std::string shape = fmt::format("B={} T={} Hq={} Hkv={} D={} W={}", B, T, Hq, Hkv, D, W);
  auto measure = [&](const std::string& what, double flops, const std::function<void()>& forward,
                     const std::function<void()>& forward_backward) {
    const double fwd = bench::median_ms(forward), train = bench::median_ms(forward_backward);
    rows.push_back({{what + ", fwd", shape, bench::fixed(fwd, 3), bench::fixed(flops / fwd / 1e9, 1)}});
    rows.push_back({{what + ", fwd + bwd", shape, bench::fixed(train, 3), bench::fixed(3.5 * flops / train / 1e9, 1)}});
  };
  // An autograd call: forward without a tape, then forward and backward.
  auto measure_ag = [&](const std::string& what, double flops, const std::function<ag::Var(bool)>& run) {
    measure(
        what, flops,
        [&] {
          ag::NoGrad no_grad;
          run(false);
        },
        [&] {
          const ag::Var o = run(true);
          o->grad = dout;
          ag::current_tape().backward();
        });
  };
  auto var = [](const Tensor& t, bool grad) { return grad ? ag::leaf(t) : ag::constant(t); };
  measure_ag("windowed attention (SWA's kernels)", window_flops,
             [&](bool g) { return ag::attention(var(q, g), var(k, g), var(v, g), here); });
  measure_ag("B'MOJO-F merged attention (two windows)", both_flops, [&](bool g) {
    const ag::Var qv = var(q, g);
    return ag::merged_attention({qv, var(k, g), var(v, g), here}, {qv, var(k_f, g), var(v_f, g), fading});
  });
  // The path without the fused two-source kernels, from the same ops: two attentions and the log-sum-exp merge;
  // backward, each window's attention backward from the merged out and lse, and the two dq summed.
  auto two_attentions = [&](Tensor* lse) {
    Tensor lse_a, lse_b;
    const Tensor out_a = ops::attention(q, k, v, here, &lse_a), out_b = ops::attention(q, k_f, v_f, fading, &lse_b);
    return ops::lse_merge(out_a, lse_a, out_b, lse_b, lse);
  };
  measure(
      "two attentions + lse_merge (unfused)", both_flops, [&] { two_attentions(nullptr); },
      [&] {
        Tensor lse, dq[2], dk[2], dv[2];
        const Tensor out = two_attentions(&lse);
        ops::attention_backward(dout, q, k, v, out, lse, here, &dq[0], &dk[0], &dv[0]);
        ops::attention_backward(dout, q, k_f, v_f, out, lse, fading, &dq[1], &dk[1], &dv[1]);
        ops::add(dq[0], dq[1]);
      });
  // The same (query, key) pairs as one window of 2W over one key set: what one kernel over both windows can reach.
  ops::AttentionOptions double_window = here;
  double_window.window = 2 * W;
  measure_ag("one window of 2W (same pairs, one source)", both_flops,
             [&](bool g) { return ag::attention(var(q, g), var(k, g), var(v, g), double_window); });
}

void bench_layers(const bench::LayerShape& s, int64_t W, const std::string& ssm, std::vector<bench::Row>& rows) {
  const int64_t B = s.batch, T = s.seq;
  ModelConfig c = s.layer_config();
  c.bmojo.window_size = W;
  c.bmojo.ssm_mixer = ssm;
  c.swa.window_size = W;
  const Tensor x = bench::normal_gpu({B, T, c.hidden_size}, 8, DType::BF16),
               dy = bench::normal_gpu({B, T, c.hidden_size}, 9, DType::BF16);
  std::vector<int32_t> position_ids(size_t(B * T));
  for (size_t i = 0; i < position_ids.size(); ++i) position_ids[i] = int32_t(int64_t(i) % T);
  layers::MixerContext ctx;
  ctx.positions = Tensor::from_vector(position_ids, {B, T}, DType::I32, Device::cuda());
  ctx.inv_freq = rope_inv_freq_for(c).to(Device::cuda());
  const std::string ssm_token = ssm == "gka" || ssm == "gated_kalmanet"   ? "GKA"
                                : ssm == "gdn" || ssm == "gated_deltanet" ? "GDN"
                                                                          : "M2";
  for (const std::string& token : {std::string("BMF"), ssm_token, std::string("SWA")}) {
    c.layer_types = {parse_mixer_token(token, "bench_bmf")};
    ParameterRegistry params;
    const std::unique_ptr<layers::SequenceMixer> mixer = layers::make_mixer(c, 0, params);
    params.materialize(Device::cuda(), DType::BF16, 7);
    const double train = bench::median_ms([&] {
      const ag::Var y = mixer->forward(ag::leaf(x), ctx);
      y->grad = dy;
      ag::current_tape().backward();
    });
    const std::string what = token == "BMF" ? "B'MOJO-F layer (" + ssm_token + " inside)" : token + " layer";
    rows.push_back({{what + ", fwd + bwd", s.layer() + fmt::format(" W={}", W), bench::fixed(train, 3), ""}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::LayerShape shape;
  int64_t window = 1024;
  std::string ssm = "mamba2";
  CLI::App app{"bench_bmf: B'MOJO-F's two-window attention against the windowed attention kernels, and its layer"};
  bench::add_layer_shape(app, shape);
  app.add_option("--window", window, "the window W (B'MOJO-F's window_size, SWA's window)");
  app.add_option("--ssm", ssm, "B'MOJO-F's SSM: mamba2, gdn or gka");
  bench::parse_or_exit(app, argc, argv);
  PRIMER_CHECK(cuda::available(), "bench_bmf needs a CUDA device");
  std::printf("# B'MOJO-F vs windowed attention, bf16, %s, %s\n", bench::device_name().c_str(), bench::today().c_str());
  std::vector<bench::Row> rows;
  bench_attention_parts(shape, window, rows);
  bench_layers(shape, window, ssm, rows);
  bench::print_table({"what", "shape", "ms", "TFLOP/s"}, rows);
  return 0;
}
