// Sequence parallelism of every mixer equals one process (f64, CPU, on the ranks mpirun gives): each rank runs its
// part of the sequence (contiguous or zig-zag) — recurrent mixers by P2P (log-depth or serial state passing), USP
// or A2A from an initial state, attention (full and sliding-window) by ring, all-gather or Ulysses — and the
// outputs and input gradients of its part, and the parameter and initial-state gradients summed over the ranks,
// must equal the whole sequence's on one rank to round-off.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/variable.h"
#include "core/cuda_runtime.h"
#include "core/ops/elementwise.h"
#include "core/sequence_layout.h"
#include "layers/mixer_factory.h"
#include "parallel/sp/sequence_parallel.h"
#include "tests/dist/dist_env.h"
#include "tests/support/mixer_checks.h"
#include "tests/support/test_util.h"

namespace primer::parallel {
namespace {

struct MixerCase {
  const char* name;
  MixerKind kind;
  int64_t q_heads, kv_heads;
  int64_t window = 5;             // SWA's and B'MOJO-F's: crosses the chunks' boundaries
  const char* bmojo_ssm = "gka";  // B'MOJO-F's SSM
};
// A2A splits both head counts over the ranks: the GQA cases run it on 2 ranks, the 4/4 ones also on 4.
const MixerCase kMixers[] = {
    {"M2", MixerKind::Mamba2, 4, 2},
    {"M2_MHA", MixerKind::Mamba2, 4, 4},
    {"GDN", MixerKind::GatedDeltaNet, 4, 2},
    {"GDN_MHA", MixerKind::GatedDeltaNet, 4, 4},
    {"GDN_QueriesExpanded", MixerKind::GatedDeltaNet, 2, 4},  // fewer query heads than kv heads
    {"KZLA", MixerKind::KaczmarzLinearAttention, 4, 4},
    {"GKA", MixerKind::GatedKalmaNet, 4, 2},
    {"GKA_MHA", MixerKind::GatedKalmaNet, 4, 4},
    {"KLA", MixerKind::KalmanLinearAttention, 2, 2},
    {"GDN2", MixerKind::GatedDeltaNet2, 4, 2},
    {"GDN2_MHA", MixerKind::GatedDeltaNet2, 4, 4},
    {"Attention", MixerKind::Attention, 4, 2},
    {"SWA", MixerKind::SlidingWindow, 4, 2},
    // B'MOJO-F's windows reach back 2W − 1 tokens: W = 2 fits every chunk of these runs (a halo from the previous
    // chunk's rank), W = 5 the longer chunks only (the shorter ones run gathered).
    {"BMF", MixerKind::BMojoF, 4, 2, 2},
    {"BMF_GDN", MixerKind::BMojoF, 4, 2, 2, "gdn"},
    {"BMF_M2", MixerKind::BMojoF, 4, 2, 2, "mamba2"},
    {"BMF_LongWindow", MixerKind::BMojoF, 4, 2, 5},
};

struct Mode {
  const char* name;
  ag::RecurrentSequenceMode recurrent;
  StatePassing passing;
  AttentionSequenceMode attention;
};
// Recurrent mixers run every recurrent mode (A2A where the heads divide the ranks; KLA, which has no A2A, by USP);
// attention every attention mode (Ulysses where the heads divide the ranks).
const Mode kModes[] = {
    {"p2p_log_depth", ag::RecurrentSequenceMode::P2P, StatePassing::LogDepth, AttentionSequenceMode::Ring},
    {"p2p_serial", ag::RecurrentSequenceMode::P2P, StatePassing::Serial, AttentionSequenceMode::AllGather},
    {"usp", ag::RecurrentSequenceMode::USP, StatePassing::LogDepth, AttentionSequenceMode::Ulysses},
    {"a2a", ag::RecurrentSequenceMode::A2A, StatePassing::LogDepth, AttentionSequenceMode::Ring},
};

bool heads_split(const MixerCase& m, int ranks) { return m.q_heads % ranks == 0 && m.kv_heads % ranks == 0; }

bool mode_applies(const MixerCase& m, const Mode& mode, int ranks) {
  if (!is_ssm(m.kind)) return mode.attention != AttentionSequenceMode::Ulysses || m.kv_heads % ranks == 0;
  return mode.recurrent != ag::RecurrentSequenceMode::A2A || heads_split(m, ranks);
}

// The name of what `mode` runs for this mixer: the recurrent mode, or the attention mode for attention.
std::string mode_name(const MixerCase& m, const Mode& mode) {
  return is_ssm(m.kind) ? mode.name : attention_sequence_mode_name(mode.attention);
}

SequenceParallelOptions options_of(const Mode& mode, SequenceLayout layout) {
  SequenceParallelOptions options;
  options.layout = layout;
  options.recurrent = mode.recurrent;
  options.state_passing = mode.passing;
  options.attention = mode.attention;
  return options;
}

ModelConfig config_for(const MixerCase& m) {
  ModelConfig c = test::tiny_mixer_config(m.q_heads, m.kv_heads, 1);
  c.layer_types = {m.kind};
  c.mamba2.use_qk_norm = true;  // RoPE and norms on B/C exercise the global positions
  c.mamba2.use_pos_emb = true;
  c.gdn.allow_neg_eigval = true;
  c.gdn.conv_bias = true;
  c.gdn2.allow_neg_eigval = true;
  c.gdn2.conv_bias = true;
  c.swa.window_size = m.window;
  c.bmojo.window_size = m.window;
  c.bmojo.ssm_mixer = m.bmojo_ssm;
  return c;
}

// This rank's part [B, T_local, ...] of a whole-sequence tensor [B, T, ...].
Tensor part_of(const Tensor& whole, int ranks, int rank, SequenceLayout layout) {
  std::vector<Tensor> pieces;
  int64_t T_local = 0;
  for (const auto& [begin, end] : sequence_part(whole.size(1), ranks, rank, layout)) {
    pieces.push_back(whole.slice(1, begin, end));
    T_local += end - begin;
  }
  Shape shape = whole.shape();
  shape[1] = T_local;
  Tensor out = Tensor::empty(shape, whole.dtype(), whole.device());
  int64_t at = 0;
  for (const Tensor& p : pieces) {
    out.slice(1, at, at + p.size(1)).copy_from(p);
    at += p.size(1);
  }
  return out;
}

struct MixerRun {
  Tensor y, dx;
  std::vector<Tensor> state_grads, param_grads;
};

// Forward and backward of the mixer on x (whole or this rank's part) from `initial`, with output gradient dy.
MixerRun run(layers::SequenceMixer& mixer, ParameterRegistry& params, const Tensor& x, const Tensor& dy,
             const layers::MixerContext& ctx, const layers::MixerState& initial) {
  for (Parameter* p : params.all()) p->var->grad = Tensor();
  const ag::Var xv = ag::leaf(x);
  layers::MixerState state;
  for (const ag::Var& c : initial.conv) state.conv.push_back(ag::leaf(c->value.clone()));
  for (const ag::Var& r : initial.recurrent) state.recurrent.push_back(ag::leaf(r->value.clone()));
  const ag::Var y = layers::mix_sequence(mixer, xv, ctx, state.empty() ? nullptr : &state);
  ag::backward(y, dy);
  MixerRun r{y->value, xv->grad, {}, {}};
  for (const ag::Var& s : state.conv) r.state_grads.push_back(s->grad);
  for (const ag::Var& s : state.recurrent) r.state_grads.push_back(s->grad);
  for (Parameter* p : params.all()) r.param_grads.push_back(p->var->grad);
  return r;
}

Tensor positions(int64_t B, int64_t T, int64_t start) {
  std::vector<int32_t> p(size_t(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) p[size_t(b * T + t)] = int32_t(start + t);
  return Tensor::from_vector(p, {B, T}, DType::I32);
}

Tensor summed_over_ranks(Communicator& comm, const Tensor& t) {
  Tensor s = t.to(Device::cpu()).to(DType::F64).clone();
  comm.all_reduce(s, ReduceOp::Sum, "test");
  return s;
}

class DistSpMixers : public ::testing::TestWithParam<MixerCase> {};

TEST_P(DistSpMixers, EveryModeAndLayoutEqualsOneRank) {
  Communicator& comm = test::world_comm();
  const int P = comm.size();
  // Seeds agree over the ranks: every rank builds the same weights and whole-sequence inputs.
  Tensor seed_t = Tensor::full({1}, double(test::fresh_seed() % 1000000), DType::F64);
  comm.broadcast(seed_t, 0, "seed");
  const uint64_t seed = uint64_t(seed_t.item());
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(P) + " ranks");

  const ModelConfig c = config_for(GetParam());
  ParameterRegistry params;
  const std::unique_ptr<layers::SequenceMixer> mixer = layers::make_mixer(c, 0, params);
  params.materialize(Device::cpu(), DType::F64, seed);
  // Slow decays (A = exp(A_log) in [0.02, 0.5], where the initialisation reaches 16) so that states carry across
  // chunks and a wrong hand-off shows far above round-off.
  for (Parameter* p : params.all())
    if (p->name.ends_with("A_log"))
      p->var->value.copy_from(test::rand_uniform(p->shape, seed + 7, std::log(0.02), std::log(0.5), DType::F64));
  const int64_t B = 2, T = 24 * (P == 3 ? 1 : 2), start = 5, D = c.hidden_size;
  const Tensor x = test::randn({B, T, D}, seed + 1), dy = test::randn({B, T, D}, seed + 2);
  layers::MixerContext whole;
  whole.positions = positions(B, T, start);
  whole.inv_freq = Tensor::full({c.head_dim / 2}, 0.3, DType::F32);
  // A realistic initial state: the mixer's own state after a prefix of 5 tokens.
  layers::MixerState initial;
  {
    ag::NoGrad no_grad;
    layers::MixerContext prefix = whole;
    prefix.positions = positions(B, 5, 0);
    mixer->forward(ag::constant(test::randn({B, 5, D}, seed + 3)), prefix, nullptr, &initial);
  }
  // B'MOJO-F's key/value cache carries no gradient and is gathered under sequence parallelism: its SSM's state alone
  // starts the run, which then trains the attention too.
  if (GetParam().kind == MixerKind::BMojoF) initial.kv.clear();
  const MixerRun reference = run(*mixer, params, x, dy, whole, initial);

  for (const SequenceLayout layout : {SequenceLayout::Contiguous, SequenceLayout::ZigZag})
    for (const Mode& mode : kModes) {
      if (!mode_applies(GetParam(), mode, P)) continue;
      SCOPED_TRACE(std::string(sequence_layout_name(layout)) + " " + mode_name(GetParam(), mode));
      SequenceParallel sp(comm, options_of(mode, layout));
      layers::MixerContext ctx;
      ctx.sequence = &sp;
      ctx.positions = part_of(whole.positions, P, comm.rank(), layout);
      ctx.inv_freq = whole.inv_freq;
      ctx.whole_positions = sp.gather_positions(ctx.positions);
      comm.reset_traffic();
      const MixerRun mine =
          run(*mixer, params, part_of(x, P, comm.rank(), layout), part_of(dy, P, comm.rank(), layout), ctx, initial);
      // A mixer that runs this mode itself never gathers the sequence (as USP does), for B'MOJO-F where its reach
      // fits the chunk.
      const int64_t chunk = T / sequence_chunks(P, layout);
      const bool gathers = !mixer->runs_sequence_parallel(mode.recurrent) ||
                           (GetParam().kind == MixerKind::BMojoF && chunk < 2 * GetParam().window - 1);
      if (is_ssm(GetParam().kind) && !gathers) {
        EXPECT_EQ(comm.traffic().bytes_sent(CollectiveKind::AllGather), 0u) << "the sequence was gathered";
      }
      test::expect_close(mine.y, part_of(reference.y, P, comm.rank(), layout), 1e-10, 1e-12, "output");
      test::expect_close(mine.dx, part_of(reference.dx, P, comm.rank(), layout), 1e-10, 1e-12, "dx");
      ASSERT_EQ(mine.state_grads.size(), reference.state_grads.size());
      for (size_t i = 0; i < mine.state_grads.size(); ++i)
        test::expect_close(summed_over_ranks(comm, mine.state_grads[i]), reference.state_grads[i], 1e-10, 1e-12,
                           "initial state " + std::to_string(i));
      const std::vector<Parameter*> all = params.all();
      for (size_t i = 0; i < all.size(); ++i)
        test::expect_close(summed_over_ranks(comm, mine.param_grads[i]), reference.param_grads[i], 1e-10, 1e-12,
                           all[i]->name);
    }
}

// Under A2A a head count that does not split over the ranks, or Adaptive GQA (which mixes all of a token's kv heads
// after the convs), is refused with an error naming the mixer and the counts.
TEST(DistSpMixersA2A, HeadsThatDoNotSplitOverTheRanksAreRefused) {
  Communicator& comm = test::world_comm();
  const int P = comm.size();
  if (P == 1) GTEST_SKIP() << "every head count splits over one rank";
  SequenceParallelOptions options;
  options.recurrent = ag::RecurrentSequenceMode::A2A;
  SequenceParallel sp(comm, options);
  const auto forward = [&](ModelConfig c) {
    ParameterRegistry params;
    const std::unique_ptr<layers::SequenceMixer> mixer = layers::make_mixer(c, 0, params);
    params.materialize(Device::cpu(), DType::F64, 1);
    const int64_t T_local = 2 * sp.chunks();
    layers::MixerContext ctx;
    ctx.sequence = &sp;
    ctx.positions = positions(1, T_local, 0);
    ctx.inv_freq = Tensor::full({c.head_dim / 2}, 0.3, DType::F32);
    mixer->forward(ag::constant(test::randn({1, T_local, c.hidden_size}, 1)), ctx);
  };
  // 3 query heads and 1 kv head: neither splits over 2 or 4 ranks, the kv head not over 3.
  for (const MixerKind kind : {MixerKind::Mamba2, MixerKind::GatedDeltaNet, MixerKind::GatedKalmaNet}) {
    ModelConfig c = test::tiny_mixer_config(3, 1, 1);
    c.layer_types = {kind};
    test::expect_error([&] { forward(c); }, {"model.layers.0", "A2A", "num_attention_heads 3", "num_key_value_heads 1",
                                             "sequence_parallel_size " + std::to_string(P)});
  }
  ModelConfig agqa = test::tiny_mixer_config(4 * P, 2 * P, 1);
  agqa.layer_types = {MixerKind::GatedDeltaNet};
  agqa.gdn.kv_proj_rank = 4;
  test::expect_error([&] { forward(agqa); }, {"model.layers.0", "Adaptive GQA", "kv_proj_rank", "p2p or usp"});
}

INSTANTIATE_TEST_SUITE_P(Mixers, DistSpMixers, ::testing::ValuesIn(kMixers),
                         [](const auto& i) { return std::string(i.param.name); });

// The same on the GPU in bf16 through the CUDA kernels (NCCL with a GPU per rank, MPI staging where ranks share
// one): every mode of kModes in both layouts — P2P (log-depth and serial), USP and A2A (where the heads split) for
// the recurrent mixers; ring, all-gather and Ulysses (where the heads split) for attention. Both the SP run and one GPU
// rank are measured against the f64 truth on the CPU (same bf16-rounded weights and inputs): SP must be as accurate as
// one rank, within twice its error plus 1e-2 — tensor by tensor where one rank is accurate (relative error < 1e-2), and
// over all parameter gradients together. A tensor whose one-rank bf16 gradient is itself off by more than that is a
// sum over every token with cancellation (measured on an H100: GKA's b_proj.bias and alpha_proj.bias gradients,
// 2–60% off f64 on one rank), and under SP that sum is split into per-rank partials rounded to bf16, a second
// sample of the same noise (7.9% where one rank drew 2.3%); such tensors count in the whole-gradient check only.
// So do tensors of fewer than kFewElements elements (the per-head gate vectors A_log, dt_bias, b_proj.bias: 4 values,
// each a sum over every token): their relative error is a statistic of a handful of heavy-tailed draws, not an average
// — on an H100 one rank drew 0.8% for GKA's dt_bias and the contiguous USP run 2.9% (B'MOJO-F over GKA, 4 ranks,
// seed 130549), inside the spread the GKA layer test measures for these gradients (up to 43% against f64).
class DistSpMixersGpu : public ::testing::TestWithParam<MixerCase> {};
constexpr int64_t kFewElements = 32;

TEST_P(DistSpMixersGpu, AsAccurateAsOneRankInBf16) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device";
  Communicator& comm = test::world_comm();
  const int P = comm.size();
  if (P < 2) GTEST_SKIP() << "one rank";
  Tensor seed_t = Tensor::full({1}, double(test::fresh_seed() % 1000000), DType::F64);
  comm.broadcast(seed_t, 0, "seed");
  const uint64_t seed = uint64_t(seed_t.item());
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(P) + " ranks");

  const Device gpu = Device::cuda(cuda::current_device()), cpu = Device::cpu();
  ModelConfig c = config_for(GetParam());
  c.hidden_size = 128;  // the CUDA kernels take head_dim 64 or 128
  c.head_dim = 64;
  ParameterRegistry params, params64;
  const std::unique_ptr<layers::SequenceMixer> mixer = layers::make_mixer(c, 0, params);
  const std::unique_ptr<layers::SequenceMixer> mixer64 = layers::make_mixer(c, 0, params64);
  params.materialize(gpu, DType::BF16, seed);
  params64.materialize(cpu, DType::F64, seed);
  for (Parameter* p : params64.all()) p->var->value.copy_from(params.get(p->name).var->value);
  const int64_t B = 2, T = 96, D = c.hidden_size;
  const Tensor x = test::randn({B, T, D}, seed + 1, DType::BF16, gpu),
               dy = test::randn({B, T, D}, seed + 2, DType::BF16, gpu);
  layers::MixerContext whole, whole64;
  whole64.positions = positions(B, T, 3);
  whole64.inv_freq = Tensor::full({c.head_dim / 2}, 0.05, DType::F32);
  whole.positions = whole64.positions.to(gpu);
  whole.inv_freq = whole64.inv_freq.to(gpu);
  const MixerRun truth = run(*mixer64, params64, x.to(cpu).to(DType::F64), dy.to(cpu).to(DType::F64), whole64, {});
  const MixerRun reference = run(*mixer, params, x, dy, whole, {});

  for (const SequenceLayout layout : {SequenceLayout::Contiguous, SequenceLayout::ZigZag})
    for (const Mode& mode : kModes) {
      if (!mode_applies(GetParam(), mode, P)) continue;
      const std::string case_name = std::string(sequence_layout_name(layout)) + " " + mode_name(GetParam(), mode);
      SCOPED_TRACE(case_name);
      const SequenceParallelOptions options = options_of(mode, layout);
      SequenceParallel sp(test::gpu_world_comm(), options);
      layers::MixerContext ctx;
      ctx.sequence = &sp;
      ctx.positions = part_of(whole64.positions, P, comm.rank(), options.layout).to(gpu);
      ctx.inv_freq = whole.inv_freq;
      ctx.whole_positions = sp.gather_positions(ctx.positions);
      const MixerRun mine = run(*mixer, params, part_of(x, P, comm.rank(), options.layout),
                                part_of(dy, P, comm.rank(), options.layout), ctx, {});
      double worst_sp = 0, worst_one = 0;
      std::string worst_name;
      auto check = [&](const Tensor& sp_value, const Tensor& one_rank, const Tensor& exact, const std::string& what) {
        const test::Diff sp_err = test::compare(sp_value, exact), one_err = test::compare(one_rank, exact);
        EXPECT_EQ(sp_err.nonfinite, 0) << what;
        if (one_err.rel_l2 < 1e-2 && exact.numel() >= kFewElements) {
          EXPECT_LE(sp_err.rel_l2, 2 * one_err.rel_l2 + 1e-2) << what << " (one rank's error " << one_err.rel_l2 << ")";
        }
        if (sp_err.rel_l2 - one_err.rel_l2 > worst_sp - worst_one) {
          worst_sp = sp_err.rel_l2;
          worst_one = one_err.rel_l2;
          worst_name = what;
        }
      };
      const int r = comm.rank();
      check(mine.y, part_of(reference.y, P, r, options.layout), part_of(truth.y, P, r, options.layout), "output");
      check(mine.dx, part_of(reference.dx, P, r, options.layout), part_of(truth.dx, P, r, options.layout), "dx");
      const std::vector<Parameter*> all = params.all();
      double sp_err2 = 0, one_err2 = 0, truth2 = 0;  // over every parameter gradient together
      for (size_t i = 0; i < all.size(); ++i) {
        const Tensor sp_grad = summed_over_ranks(comm, mine.param_grads[i]);
        check(sp_grad, reference.param_grads[i], truth.param_grads[i], all[i]->name);
        const std::vector<double> a = sp_grad.to_vector<double>(),
                                  b = reference.param_grads[i].to(Device::cpu()).to(DType::F64).to_vector<double>(),
                                  t = truth.param_grads[i].to_vector<double>();
        for (size_t j = 0; j < t.size(); ++j) {
          sp_err2 += (a[j] - t[j]) * (a[j] - t[j]);
          one_err2 += (b[j] - t[j]) * (b[j] - t[j]);
          truth2 += t[j] * t[j];
        }
      }
      EXPECT_LE(std::sqrt(sp_err2 / truth2), 2 * std::sqrt(one_err2 / truth2) + 1e-2) << "all parameter gradients";
      if (comm.rank() == 0)
        std::printf("%s %s on %d ranks (%s): relative L2 error against f64 %.3g (one rank: %.3g), %s\n",
                    GetParam().name, case_name.c_str(), P, test::gpu_world_comm().backend_name().c_str(), worst_sp,
                    worst_one, worst_name.c_str());
    }
}

// Every mixer has CUDA kernels.
INSTANTIATE_TEST_SUITE_P(Mixers, DistSpMixersGpu, ::testing::ValuesIn(kMixers),
                         [](const auto& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace primer::parallel
