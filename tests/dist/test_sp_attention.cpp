// Attention under sequence parallelism (parallel/sp/sp_attention.h) against single-process attention on the whole
// sequence, in f64 on the CPU: every mode (ring, all-gather, Ulysses) × layout (contiguous, zig-zag) × mask
// (causal, non-causal, sliding windows that cross chunk boundaries, GQA, a custom scale). Each rank draws the
// whole sequence from one seed shared by all ranks and keeps its chunks (sequence_part); its output and its
// dq, dk, dv must equal its rows of ops::attention / ops::attention_backward to rounding (1e-12 relative).
#include <gtest/gtest.h>

#include "core/autograd/variable.h"
#include "core/ops/attention.h"
#include "core/sequence_layout.h"
#include "parallel/sp/sp_attention.h"
#include "tests/dist/dist_env.h"
#include "tests/support/test_util.h"

namespace primer::parallel {
namespace {

using test::world_comm;

// A seed drawn on rank 0 (PRIMER_TEST_SEED replays it) and shared, so that every rank draws the same sequence.
uint64_t shared_seed(Communicator& comm) {
  Tensor s = Tensor::from_vector(std::vector<int64_t>{int64_t(test::fresh_seed() >> 1)}, {1}, DType::I64);
  comm.broadcast(s, 0);
  return uint64_t(s.to_vector<int64_t>()[0]);
}

// This rank's rows of x [B, T, ...]: its chunks, concatenated along T in the layout's order.
Tensor local_rows(const Tensor& x, const Communicator& comm, SequenceLayout layout) {
  const auto parts = sequence_part(x.size(1), comm.size(), comm.rank(), layout);
  Shape shape = x.shape();
  shape[1] = 0;
  for (const auto& [b, e] : parts) shape[1] += e - b;
  Tensor local = Tensor::empty(shape, x.dtype(), x.device());
  int64_t at = 0;
  for (const auto& [b, e] : parts) {
    local.slice(1, at, at + e - b).copy_from(x.slice(1, b, e));
    at += e - b;
  }
  return local;
}

struct Case {
  std::string name;
  int64_t hq, hkv;
  ops::AttentionOptions options;
};

std::vector<Case> cases(int ranks) {
  ops::AttentionOptions causal, full, window5, window1, window13, scaled;
  full.causal = false;
  window5.window = 5;  // crosses chunk boundaries at every rank count (chunks of 3 to 12 tokens)
  window1.window = 1;  // only the diagonal: every off-diagonal block is skipped
  window13.window = 13;
  scaled.scale = 0.3;
  return {
      {"causal gqa", 4, 2, causal},
      {"non-causal gqa", 4, 2, full},
      {"window 5 gqa", 4, 2, window5},
      {"window 1", 4, 2, window1},
      {"window 13 gqa 4:1", 4, 1, window13},
      // Heads that divide the ranks, so Ulysses runs at every rank count.
      {"causal heads by ranks, scale 0.3", 2 * ranks, ranks, scaled},
      {"non-causal heads by ranks", 2 * ranks, ranks, full},
      {"window 5 heads by ranks", ranks, ranks, window5},
  };
}

constexpr int64_t kB = 2, kT = 24, kDh = 8;  // T = 24 splits into 2P chunks for P = 1, 2, 3, 4

struct Inputs {
  Tensor q, k, v, dout;  // the whole sequence
};

Inputs draw(const Case& c, uint64_t seed) {
  // q, k ~ N(0, 1): scores of size ~sqrt(Dh) · scale, so the softmax is far from flat.
  return {test::randn({kB, kT, c.hq, kDh}, seed), test::randn({kB, kT, c.hkv, kDh}, seed + 1),
          test::randn({kB, kT, c.hkv, kDh}, seed + 2), test::randn({kB, kT, c.hq, kDh}, seed + 3)};
}

bool mode_applies(AttentionSequenceMode mode, const Case& c, int ranks) {
  return mode != AttentionSequenceMode::Ulysses || (c.hq % ranks == 0 && c.hkv % ranks == 0);
}

const AttentionSequenceMode kModes[] = {AttentionSequenceMode::Ring, AttentionSequenceMode::AllGather,
                                        AttentionSequenceMode::Ulysses};
const SequenceLayout kLayouts[] = {SequenceLayout::Contiguous, SequenceLayout::ZigZag};

constexpr double kRel = 1e-12, kAbs = 1e-12;

TEST(DistSpAttention, MatchesSingleProcessForwardAndBackward) {
  Communicator& comm = world_comm();
  const uint64_t seed = shared_seed(comm);
  SCOPED_TRACE("PRIMER_TEST_SEED=" + std::to_string(seed));
  int ulysses_checked = 0;
  for (const Case& c : cases(comm.size())) {
    const Inputs in = draw(c, seed);
    Tensor lse, dq, dk, dv;
    const Tensor out = ops::attention(in.q, in.k, in.v, c.options, &lse);
    ops::attention_backward(in.dout, in.q, in.k, in.v, out, lse, c.options, &dq, &dk, &dv);
    for (AttentionSequenceMode mode : kModes)
      for (SequenceLayout layout : kLayouts) {
        if (!mode_applies(mode, c, comm.size())) continue;
        const std::string what = fmt::format("{} {} {} on {} ranks", c.name, attention_sequence_mode_name(mode),
                                             sequence_layout_name(layout), comm.size());
        SCOPED_TRACE(what);
        ag::Tape tape;
        ag::TapeScope scope(tape);
        ag::Var q = ag::leaf(local_rows(in.q, comm, layout), "q");
        ag::Var k = ag::leaf(local_rows(in.k, comm, layout), "k");
        ag::Var v = ag::leaf(local_rows(in.v, comm, layout), "v");
        ag::Var o = sequence_parallel_attention(comm, layout, mode, q, k, v, c.options);
        test::expect_close(o->value, local_rows(out, comm, layout), kRel, kAbs, what + " out");
        ag::backward(o, local_rows(in.dout, comm, layout));
        test::expect_close(q->grad, local_rows(dq, comm, layout), kRel, kAbs, what + " dq");
        test::expect_close(k->grad, local_rows(dk, comm, layout), kRel, kAbs, what + " dk");
        test::expect_close(v->grad, local_rows(dv, comm, layout), kRel, kAbs, what + " dv");
        ulysses_checked += mode == AttentionSequenceMode::Ulysses;
      }
  }
  EXPECT_GE(ulysses_checked, 3 * 2) << "the heads-by-ranks cases run Ulysses in both layouts";
}

// f32 inputs (the CPU's fast path; f32 statistics and accumulators, as on CUDA) against the f64 reference: the
// merges and the travelling sums add no error beyond f32 rounding. Bounds: 1e-6 relative (L2), and 1e-5 absolute
// because dk and dv sum ~50 products to magnitudes up to ~10, where an f32 ulp is ~1e-6 (measured max ~1e-6).
TEST(DistSpAttention, F32MatchesTheF64Reference) {
  Communicator& comm = world_comm();
  const uint64_t seed = shared_seed(comm);
  SCOPED_TRACE("PRIMER_TEST_SEED=" + std::to_string(seed));
  ops::AttentionOptions window;
  window.window = 5;
  const Case c{"window 5, heads by ranks", 2 * comm.size(), comm.size(), window};
  const Inputs in = draw(c, seed);
  Tensor lse, dq, dk, dv;
  const Tensor out = ops::attention(in.q, in.k, in.v, c.options, &lse);
  ops::attention_backward(in.dout, in.q, in.k, in.v, out, lse, c.options, &dq, &dk, &dv);
  auto f32_rows = [&](const Tensor& x, SequenceLayout layout) { return local_rows(x, comm, layout).to(DType::F32); };
  for (AttentionSequenceMode mode : kModes)
    for (SequenceLayout layout : kLayouts) {
      const std::string what = fmt::format("{} {}", attention_sequence_mode_name(mode), sequence_layout_name(layout));
      SCOPED_TRACE(what);
      ag::Tape tape;
      ag::TapeScope scope(tape);
      ag::Var q = ag::leaf(f32_rows(in.q, layout), "q");
      ag::Var k = ag::leaf(f32_rows(in.k, layout), "k");
      ag::Var v = ag::leaf(f32_rows(in.v, layout), "v");
      ag::Var o = sequence_parallel_attention(comm, layout, mode, q, k, v, c.options);
      EXPECT_EQ(o->value.dtype(), DType::F32);
      test::expect_close(o->value, local_rows(out, comm, layout), 1e-6, 1e-5, what + " out");
      ag::backward(o, f32_rows(in.dout, layout));
      EXPECT_EQ(k->grad.dtype(), DType::F32);
      test::expect_close(q->grad, local_rows(dq, comm, layout), 1e-6, 1e-5, what + " dq");
      test::expect_close(k->grad, local_rows(dk, comm, layout), 1e-6, 1e-5, what + " dk");
      test::expect_close(v->grad, local_rows(dv, comm, layout), 1e-6, 1e-5, what + " dv");
    }
}

// The backward is collective: a rank whose output got no gradient still runs it (zeros for its dout), and the
// gradients it produces for the other ranks' keys are still exact.
TEST(DistSpAttention, BackwardRunsOnRanksWithoutAGradient) {
  Communicator& comm = world_comm();
  const uint64_t seed = shared_seed(comm);
  SCOPED_TRACE("PRIMER_TEST_SEED=" + std::to_string(seed));
  const Case c{"causal gqa", 4, 2, {}};
  const Inputs in = draw(c, seed);
  for (AttentionSequenceMode mode : kModes)
    for (SequenceLayout layout : kLayouts) {
      if (!mode_applies(mode, c, comm.size())) continue;
      SCOPED_TRACE(fmt::format("{} {}", attention_sequence_mode_name(mode), sequence_layout_name(layout)));
      // Only rank 0's rows get an upstream gradient: the reference's dout is zero elsewhere.
      Tensor dout = Tensor::zeros(in.dout.shape(), DType::F64);
      for (const auto& [b, e] : sequence_part(kT, comm.size(), 0, layout))
        dout.slice(1, b, e).copy_from(in.dout.slice(1, b, e));
      Tensor lse, dq, dk, dv;
      const Tensor out = ops::attention(in.q, in.k, in.v, c.options, &lse);
      ops::attention_backward(dout, in.q, in.k, in.v, out, lse, c.options, &dq, &dk, &dv);

      ag::Tape tape;
      ag::TapeScope scope(tape);
      ag::Var q = ag::leaf(local_rows(in.q, comm, layout), "q");
      ag::Var k = ag::leaf(local_rows(in.k, comm, layout), "k");
      ag::Var v = ag::leaf(local_rows(in.v, comm, layout), "v");
      ag::Var o = sequence_parallel_attention(comm, layout, mode, q, k, v, c.options);
      if (comm.rank() == 0)
        ag::backward(o, local_rows(in.dout, comm, layout));
      else
        tape.backward();  // no gradient reaches o here
      test::expect_close(k->grad, local_rows(dk, comm, layout), kRel, kAbs, "dk");
      test::expect_close(v->grad, local_rows(dv, comm, layout), kRel, kAbs, "dv");
      if (comm.rank() == 0) test::expect_close(q->grad, local_rows(dq, comm, layout), kRel, kAbs, "dq");
    }
}

// The bytes each rank sends are those of the formulas in docs/distributed.md ("Attention under sequence
// parallelism"), with b = 8 (f64, so the accumulation dtype of the travelling / reduced gradients is q's too).
TEST(DistSpAttention, TrafficMatchesTheDocumentedVolumes) {
  Communicator& comm = world_comm();
  const uint64_t p = uint64_t(comm.size()), b = 8, hq = 2 * p, hkv = p;
  const Case c{"causal heads by ranks", int64_t(hq), int64_t(hkv), {}};
  const Inputs in = draw(c, 7);
  const uint64_t kv_local = uint64_t(kB * kT / int64_t(p)) * 2 * hkv * kDh * b;  // this rank's K and V
  const uint64_t qkv_local = uint64_t(kB * kT / int64_t(p)) * (hq + 2 * hkv) * kDh * b;
  const uint64_t o_local = uint64_t(kB * kT / int64_t(p)) * hq * kDh * b;
  struct Expected {
    AttentionSequenceMode mode;
    uint64_t forward, backward;
  };
  const Expected expected[] = {
      // Ring: P−1 hops of K/V; backward P−1 hops of K/V and P hops of the dK/dV accumulators.
      {AttentionSequenceMode::Ring, (p - 1) * kv_local, (p - 1) * kv_local + (p > 1 ? p : 0) * kv_local},
      // All-gather: (P−1) shards gathered; backward gathers again and reduce-scatters (P−1) shards of dK/dV.
      {AttentionSequenceMode::AllGather, (p - 1) * kv_local, 2 * (p - 1) * kv_local},
      // Ulysses: (P−1)/P of q, k, v and of the output; the backward moves dout and dq, dk, dv alike.
      {AttentionSequenceMode::Ulysses, (p - 1) * (qkv_local + o_local) / p, (p - 1) * (o_local + qkv_local) / p},
  };
  for (const Expected& e : expected) {
    SCOPED_TRACE(attention_sequence_mode_name(e.mode));
    ag::Tape tape;
    ag::TapeScope scope(tape);
    ag::Var q = ag::leaf(local_rows(in.q, comm, SequenceLayout::ZigZag), "q");
    ag::Var k = ag::leaf(local_rows(in.k, comm, SequenceLayout::ZigZag), "k");
    ag::Var v = ag::leaf(local_rows(in.v, comm, SequenceLayout::ZigZag), "v");
    comm.reset_traffic();
    ag::Var o = sequence_parallel_attention(comm, SequenceLayout::ZigZag, e.mode, q, k, v, c.options);
    EXPECT_EQ(comm.traffic().total_sent(), e.forward) << "forward";
    EXPECT_EQ(comm.traffic().total_received(), e.forward) << "forward";
    comm.reset_traffic();
    ag::backward(o, local_rows(in.dout, comm, SequenceLayout::ZigZag));
    EXPECT_EQ(comm.traffic().total_sent(), e.backward) << "backward";
    EXPECT_EQ(comm.traffic().total_received(), e.backward) << "backward";
  }
  comm.reset_traffic();
}

TEST(DistSpAttention, UlyssesRefusesHeadsThatDoNotDivideTheRanks) {
  Communicator& comm = world_comm();
  if (comm.size() < 2) GTEST_SKIP() << "every head count divides one rank";
  const int64_t p = comm.size(), hkv = p + 1, tl = kT / p;
  ag::Var q = ag::leaf(Tensor::zeros({kB, tl, 2 * hkv, kDh}, DType::F64), "q");
  ag::Var kv = ag::leaf(Tensor::zeros({kB, tl, hkv, kDh}, DType::F64), "k");
  test::expect_error(
      [&] {
        sequence_parallel_attention(comm, SequenceLayout::Contiguous, AttentionSequenceMode::Ulysses, q, kv, kv, {});
      },
      {"ulysses", fmt::format("{} sequence-parallel ranks", p), fmt::format("q has {} heads and k/v {}", 2 * hkv, hkv),
       "use ring or all-gather"});
  ag::current_tape().clear();
}

TEST(DistSpAttention, ModeNames) {
  for (AttentionSequenceMode mode : kModes)
    EXPECT_EQ(parse_attention_sequence_mode(attention_sequence_mode_name(mode)), mode);
  test::expect_error([] { parse_attention_sequence_mode("zigzag"); }, {"'zigzag'", "ring, all-gather or ulysses"});
}

}  // namespace
}  // namespace primer::parallel
