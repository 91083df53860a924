// Sequence parallelism of one mixer layer, forward + backward, on every rank of the job: time (largest rank) and the
// bytes each rank sent through the sequence-parallel communicator (its own traffic counters, per layer), next to the
// formula for those bytes (docs/distributed.md, "Communication per layer").
//
// On one rank the P2P rows measure P2P's compute overhead against the plain layer (the zero-state summaries and the
// halo; no communication); under mpirun the modes run as they train. CPU runs check the counters (one untimed-warmup
// pass, wall-clock median); GPU runs time with CUDA events.
// Usage: [mpirun -np N] bench_sp [--mixers M2,GDN,GKA] [--modes plain,p2p,p2p-serial,usp,a2a] [--batch B] [--seq T]
//          [--hidden 2048] [--heads 16] [--kv-heads 16] [--head-dim 128] [--layout zigzag|contiguous]
//          [--device cuda|cpu] [--iters 10] [--formula-ranks P]
// With --formula-ranks P nothing runs: the formula's bytes for P ranks (bf16 activations) are printed instead.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/cuda_runtime.h"
#include "core/rng.h"
#include "layers/hybrid_config.h"
#include "layers/mixer_factory.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/world_communicator.h"
#include "parallel/sp/sequence_parallel.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

struct Options {
  std::vector<std::string> mixers{"M2", "GDN", "GKA"};
  std::vector<std::string> modes{"plain", "p2p", "p2p-serial", "usp"};
  int64_t batch = 1, seq = 16384, hidden = 2048, heads = 16, kv_heads = 16, head_dim = 128;
  std::string layout = "zigzag", device = "cuda";
  int iters = 10;
  int formula_ranks = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_sp: one mixer layer forward + backward under each sequence-parallel mode, on every rank"};
  app.add_option("--mixers", o.mixers, "mixers to run (M2, GDN, GKA, ...)")->delimiter(',')->capture_default_str();
  app.add_option("--modes", o.modes, "plain, p2p, p2p-serial, usp, a2a")->delimiter(',')->capture_default_str();
  app.add_option("--batch", o.batch, "sequences")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seq", o.seq, "tokens per sequence (the whole sequence)")->capture_default_str();
  app.add_option("--hidden", o.hidden, "hidden size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--heads", o.heads, "query heads")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--kv-heads", o.kv_heads, "key/value heads")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--head-dim", o.head_dim, "head dimension")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--layout", o.layout, "contiguous or zigzag")->capture_default_str();
  app.add_option("--device", o.device, "cpu or cuda")->capture_default_str();
  app.add_option("--iters", o.iters, "timed iterations")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--formula-ranks", o.formula_ranks, "ranks of the bytes-moved formula (0: this job's)")
      ->capture_default_str();
  bench::parse_or_exit(app, argc, argv);
  return o;
}

ModelConfig config_for(const Options& o, MixerKind kind) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 1024;
  c.hidden_size = o.hidden;
  c.intermediate_size = 3 * o.hidden;
  c.num_hidden_layers = 1;
  c.num_attention_heads = o.heads;
  c.num_key_value_heads = o.kv_heads;
  c.head_dim = o.head_dim;
  c.max_position_embeddings = o.seq;
  c.layer_types = {kind};
  return c;
}

Tensor normal(const Shape& shape, uint64_t seed, DType dtype, Device device) {
  std::vector<float> v(size_t(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(normal01(seed, i));
  return Tensor::from_vector(v, shape, DType::F32).to(dtype).to(device);
}

// What one rank sends for one layer's forward + backward, per the formulas of docs/distributed.md.
double formula_bytes(const std::string& mode, const ModelConfig& c, MixerKind kind, const Options& o, int P,
                     int64_t chunks, int rank, int64_t elem) {
  if (P == 1) return 0;
  const double B = double(o.batch), T_local = double(o.seq / P), D = double(o.hidden);
  if (mode == "usp") return 2.0 * (P - 1) * B * T_local * D * double(elem);  // all-gather x, reduce-scatter dx
  if (mode == "a2a") {
    // The per-head tensors in (pre-conv projections and gates; GDN's and GKA's decay g and GDN's β in f32) and the
    // core's output back, (P−1)/P of each, forward and backward.
    const double Hq = double(c.num_attention_heads), Hkv = double(c.num_key_value_heads), Dh = double(c.head_dim);
    const double H = std::max(Hq, Hkv), b = double(elem);
    double in = 0;
    if (kind == MixerKind::Mamba2)
      in = (2 * Hkv * Dh + Hq * Dh + Hq) * b;
    else if (kind == MixerKind::GatedKalmaNet)
      in = (Hq + 2 * Hkv) * Dh * b + H * 4 +
           H * b * ((c.gka.use_beta_gate ? 1 : 0) + (c.gka.use_alpha_connection ? 1 : 0));
    else
      in = (Hq + 2 * Hkv) * Dh * b + 2 * H * 4;
    return 2.0 * (P - 1) / P * B * T_local * (in + H * Dh * b);
  }
  // P2P: the halo (conv_size − 1 rows of the conv inputs) out and its gradient back, per chunk with a successor
  // (forward) or a predecessor (backward) on another rank; the state hops of every chain, forward and backward.
  const double H = double(std::max(c.num_attention_heads, c.num_key_value_heads)), K = double(c.head_dim);
  double conv_channels = 0, taps = 0, state = 0, transition = 0;
  const double qkv = double(c.num_attention_heads + 2 * c.num_key_value_heads) * K;
  switch (kind) {
    case MixerKind::Mamba2:
      conv_channels = double(c.num_attention_heads + 2 * c.num_key_value_heads) * K;
      taps = double(c.mamba2.conv_size);
      state = H * K * K * 4;
      transition = H * 4;
      break;
    case MixerKind::GatedDeltaNet:
    case MixerKind::KaczmarzLinearAttention:
      conv_channels = c.gdn.use_short_conv ? qkv : 0;
      taps = double(c.gdn.conv_size);
      state = H * K * K * 4;
      transition = H * K * K * 4;
      break;
    case MixerKind::GatedKalmaNet:
      conv_channels = double(c.num_attention_heads + c.num_key_value_heads * (c.gka.use_v_conv ? 2 : 1)) * K;
      taps = double(c.gka.conv_size);
      state = 2 * H * K * K * 4;  // H and S
      transition = 2 * H * 4;
      break;
    default: return 0;
  }
  double bytes = 0;
  // Halos: every chunk but the sequence's last sends forward; every chunk but the first sends its gradient back;
  // the zig-zag middle stays on the last rank.
  for (int64_t slot = 0; slot < chunks; ++slot) {
    const int64_t c_index =
        chunk_index(rank, slot, P, chunks == 1 ? SequenceLayout::Contiguous : SequenceLayout::ZigZag);
    const int64_t last = P * chunks - 1;
    const bool middle = chunks == 2 && rank == P - 1;
    if (c_index < last && !(middle && slot == 0)) bytes += B * (taps - 1) * conv_channels * double(elem);
    if (c_index > 0 && !(middle && slot == 1)) bytes += B * (taps - 1) * conv_channels * double(elem);
  }
  // States: per chain, the serial hop or the log-depth rounds this rank sends in (E always, M except in the last).
  const bool serial = mode == "p2p-serial";
  for (int64_t chain = 0; chain < chunks; ++chain) {
    const int p = chain == 0 ? rank : P - 1 - rank;
    for (int direction = 0; direction < 2; ++direction) {  // forward along the chain, backward against it
      const int pos = direction == 0 ? p : P - 1 - p;
      if (serial) {
        if (pos + 1 < P) bytes += B * state;
        continue;
      }
      const bool one_round = P == 2;
      if (pos + 1 < P) bytes += B * (state + (one_round ? 0 : transition));  // the shift
      for (int d = 1; d < P - 1; d *= 2) {
        const bool last_round = 2 * d >= P - 1;
        if (pos >= 1 && pos + d < P) bytes += B * (state + (last_round ? 0 : transition));
      }
    }
  }
  return bytes;
}

bench::Row measure(const Options& o, const std::string& mixer_token, const std::string& mode,
                   parallel::Communicator& comm, parallel::Communicator& host, Device device, DType dtype) {
  const MixerKind kind = parse_mixer_token(mixer_token, "--mixers");
  const ModelConfig c = config_for(o, kind);
  ParameterRegistry params;
  const std::unique_ptr<layers::SequenceMixer> mixer = layers::make_mixer(c, 0, params);
  params.materialize(device, dtype, 5);
  const int P = comm.size();
  parallel::SequenceParallelOptions options;
  options.layout = parse_sequence_layout(o.layout);
  options.recurrent = parallel::parse_recurrent_sequence_mode(mode == "p2p-serial" || mode == "plain" ? "p2p" : mode);
  options.state_passing = mode == "p2p-serial" ? parallel::StatePassing::Serial : parallel::StatePassing::LogDepth;
  parallel::SequenceParallel sp(comm, options);
  const bool plain = mode == "plain";
  PRIMER_CHECK(!plain || P == 1, "bench_sp: mode plain runs on one rank");

  const int64_t T_local = o.seq / P;
  std::vector<int32_t> pos;
  for (int64_t b = 0; b < o.batch; ++b)
    for (const auto& [begin, end] : sequence_part(o.seq, P, comm.rank(), options.layout))
      for (int64_t t = begin; t < end; ++t) pos.push_back(int32_t(t));
  layers::MixerContext ctx;
  ctx.positions = Tensor::from_vector(pos, {o.batch, T_local}, DType::I32, device);
  ctx.inv_freq = Tensor::full({c.head_dim / 2}, 1e-3, DType::F32, device);
  if (!plain) {
    ctx.sequence = &sp;
    if (mode == "usp") ctx.whole_positions = sp.gather_positions(ctx.positions);
  }
  const Tensor x = normal({o.batch, T_local, o.hidden}, 11 + uint64_t(comm.rank()), dtype, device);
  const Tensor dy = normal({o.batch, T_local, o.hidden}, 12 + uint64_t(comm.rank()), dtype, device);
  auto step = [&] {
    const ag::Var y = layers::mix_sequence(*mixer, ag::leaf(x), ctx);
    ag::backward(y, dy);
    params.zero_grads();
  };
  step();  // warm-up; then one pass counted
  comm.reset_traffic();
  step();
  const double sent = double(comm.traffic().total_sent());
  const double ms = bench::median_ms_on(device, step, device.is_cuda() ? 2 : 0, o.iters);
  Tensor worst = Tensor::from_vector(
      std::vector<double>{ms, sent, formula_bytes(mode, c, kind, o, P, sp.chunks(), comm.rank(), dtype_size(dtype))},
      {3}, DType::F64);
  host.all_reduce(worst, parallel::ReduceOp::Max, "bench");
  const std::vector<double> w = worst.to_vector<double>();
  auto mb = [](double bytes) { return fmt::format("{:.3f}", bytes / 1e6); };
  return {{mixer_token, mode, std::to_string(P), fmt::format("{}x{}", o.batch, o.seq), fmt::format("{:.3f}", w[0]),
           mb(w[1]), mb(w[2])}};
}

// The formula's bytes per rank (the largest rank) for P ranks, one layer forward + backward, bf16 activations.
void print_formula(const Options& o) {
  const int P = o.formula_ranks;
  const SequenceLayout layout = parse_sequence_layout(o.layout);
  const int64_t chunks = sequence_chunks(P, layout) / P;
  std::vector<bench::Row> rows;
  for (const std::string& m : o.mixers)
    for (const std::string& mode : o.modes) {
      if (mode == "plain") continue;
      const MixerKind kind = parse_mixer_token(m, "--mixers");
      double worst = 0;
      for (int r = 0; r < P; ++r)
        worst = std::max(worst, formula_bytes(mode, config_for(o, kind), kind, o, P, chunks, r, 2));
      rows.push_back(
          {{m, mode, std::to_string(P), fmt::format("{}x{}", o.batch, o.seq), fmt::format("{:.3f}", worst / 1e6)}});
    }
  std::printf("# bench_sp formula — one layer fwd+bwd, hidden %lld, %lld/%lld heads of %lld, bf16, %s layout\n",
              static_cast<long long>(o.hidden), static_cast<long long>(o.heads), static_cast<long long>(o.kv_heads),
              static_cast<long long>(o.head_dim), o.layout.c_str());
  bench::print_table({"mixer", "mode", "ranks", "B x T (global)", "sent MB/rank (formula)"}, rows);
}

}  // namespace

int main(int argc, char** argv) {
  parallel::WorldScope world(argc, argv);
  const Options o = parse(argc, argv);
  if (o.formula_ranks > 0) {
    print_formula(o);
    return 0;
  }
  Device device = Device::cpu();
  if (o.device == "cuda") {
    const int gpu = parallel::select_local_gpu();
    if (gpu < 0) {
      std::puts("bench_sp: no CUDA device (use --device cpu)");
      return 0;
    }
    device = Device::cuda(gpu);
  }
  const DType dtype = device.is_cuda() ? DType::BF16 : DType::F32;
  const auto comm = parallel::make_world_communicator(device, {.timeout_seconds = 600});
  const auto host = parallel::make_world_communicator(Device::cpu(), {.timeout_seconds = 600});
  std::printf("# bench_sp — one mixer layer fwd+bwd, hidden %lld, %lld/%lld heads of %lld, %s %s, %s layout — %s, %s\n",
              static_cast<long long>(o.hidden), static_cast<long long>(o.heads), static_cast<long long>(o.kv_heads),
              static_cast<long long>(o.head_dim), device.is_cuda() ? "cuda" : "cpu", dtype_name(dtype),
              o.layout.c_str(), device.is_cuda() ? bench::device_name().c_str() : "CPU", bench::today().c_str());
  std::vector<bench::Row> rows;
  for (const std::string& m : o.mixers)
    for (const std::string& mode : o.modes) {
      if (mode == "plain" && comm->size() > 1) continue;
      std::printf("measuring %s %s on %d rank(s) ...\n", m.c_str(), mode.c_str(), comm->size());
      std::fflush(stdout);
      rows.push_back(measure(o, m, mode, *comm, *host, device, dtype));
    }
  bench::print_table({"mixer", "mode", "ranks", "B x T (global)", "fwd+bwd ms (max rank)", "sent MB/rank (counters)",
                      "sent MB/rank (formula)"},
                     rows);
  return 0;
}
