// Attention on the CPU: the row-by-row reference against a direct full-matrix formula, f64 finite-difference
// gradient checks of the hand-written backward (GQA, causal with offsets, sliding window, non-causal, Tq != Tk),
// the f32 path against f64, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/ops/attention.h"
#include "core/ops/attention_over_cache.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

struct Case {
  const char* name;
  int64_t B, Tq, Tk, Hq, Hkv, Dh;
  ops::AttentionOptions opt;
};

// Every masking mode the Transformer layer and sequence parallelism use. "offsets" is a query chunk that follows a
// key chunk (q_offset > k_offset), "late keys" starts the keys after some queries so those rows see nothing.
const Case kCases[] = {
    {"causal gqa", 2, 5, 5, 4, 2, 3, {}},
    {"causal offsets", 1, 4, 6, 4, 2, 3, {0, true, 0, 7, 3}},
    {"window", 1, 6, 6, 4, 2, 3, {0, true, 3, 0, 0}},
    {"window offsets", 1, 5, 7, 2, 1, 4, {0.7, true, 4, 6, 2}},
    {"non-causal tq!=tk", 2, 3, 5, 4, 2, 3, {0, false, 0, 0, 0}},
    {"late keys", 1, 5, 4, 2, 2, 3, {0, true, 0, 0, 2}},
};

// The textbook formula with the whole score matrix, independent of the row-by-row implementation.
void direct_attention(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v, std::vector<double>& out,
                      std::vector<double>& lse) {
  const auto qv = q.to_vector<double>(), kv = k.to_vector<double>(), vv = v.to_vector<double>();
  const double scale = c.opt.scale != 0 ? c.opt.scale : 1 / std::sqrt(double(c.Dh));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  out.assign(size_t(c.B * c.Tq * c.Hq * c.Dh), 0.0);
  lse.assign(size_t(c.B * c.Hq * c.Tq), neg_inf);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t g = h / (c.Hq / c.Hkv);
      for (int64_t i = 0; i < c.Tq; ++i) {
        std::vector<double> s(size_t(c.Tk), neg_inf);
        for (int64_t j = 0; j < c.Tk; ++j) {
          const int64_t qp = c.opt.q_offset + i, kp = c.opt.k_offset + j;
          const bool vis = !c.opt.causal || (kp <= qp && (c.opt.window == 0 || qp - kp < c.opt.window));
          if (!vis) continue;
          double dot = 0;
          for (int64_t d = 0; d < c.Dh; ++d)
            dot += qv[size_t(((b * c.Tq + i) * c.Hq + h) * c.Dh + d)] *
                   kv[size_t(((b * c.Tk + j) * c.Hkv + g) * c.Dh + d)];
          s[size_t(j)] = dot * scale;
        }
        double sum = 0;
        for (double x : s) sum += std::exp(x);  // small O(1) scores: no max shift needed here
        if (sum == 0) continue;
        lse[size_t((b * c.Hq + h) * c.Tq + i)] = std::log(sum);
        for (int64_t j = 0; j < c.Tk; ++j)
          for (int64_t d = 0; d < c.Dh; ++d)
            out[size_t(((b * c.Tq + i) * c.Hq + h) * c.Dh + d)] +=
                std::exp(s[size_t(j)]) / sum * vv[size_t(((b * c.Tk + j) * c.Hkv + g) * c.Dh + d)];
      }
    }
}

TEST(Attention, ForwardMatchesTheFullMatrixFormula) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Tensor q = test::randn({c.B, c.Tq, c.Hq, c.Dh}, seed);
    const Tensor k = test::randn({c.B, c.Tk, c.Hkv, c.Dh}, seed + 1);
    const Tensor v = test::randn({c.B, c.Tk, c.Hkv, c.Dh}, seed + 2);
    Tensor lse;
    const Tensor out = ops::attention(q, k, v, c.opt, &lse);
    ASSERT_EQ(lse.shape(), (Shape{c.B, c.Hq, c.Tq}));
    std::vector<double> out_ref, lse_ref;
    direct_attention(c, q, k, v, out_ref, lse_ref);
    // Both sides are f64 sums of a few O(1) terms: agreement to ~1e-15; 1e-12 leaves room for exp/log.
    test::expect_close(out, Tensor::from_vector(out_ref, out.shape(), DType::F64), 1e-12, 1e-12, "out");
    const auto lv = lse.to_vector<double>();
    for (size_t i = 0; i < lv.size(); ++i) {
      if (std::isinf(lse_ref[i])) {
        EXPECT_TRUE(std::isinf(lv[i]) && lv[i] < 0) << "row " << i << " has no visible key, lse " << lv[i];
      } else {
        EXPECT_NEAR(lv[i], lse_ref[i], 1e-12) << "lse row " << i;
      }
    }
    // The f32 path: inputs rounded to 2^-24 relative, sums in double, output rounded to f32.
    Tensor lse32;
    test::expect_close(ops::attention(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), c.opt, &lse32), out, 1e-5,
                       1e-5, "out f32");
    EXPECT_EQ(lse32.dtype(), DType::F32);
  }
}

// One query over a cache cut into chunks (whole chunks as one batch, a shorter tail) and merged by the parts'
// log-sum-exps equals one attention over the whole cache; too few keys for two parts fall back to it.
TEST(Attention, OverACacheInChunksEqualsOneAttention) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const auto& [keys, chunk] : {std::pair<int64_t, int64_t>{50, 8}, {48, 8}, {9, 8}, {7, 8}, {300, 37}}) {
    SCOPED_TRACE("keys " + std::to_string(keys) + ", chunks of " + std::to_string(chunk));
    const Tensor q = test::randn({1, 1, 4, 8}, seed), k = test::randn({1, keys, 2, 8}, seed + 1),
                 v = test::randn({1, keys, 2, 8}, seed + 2);
    ops::AttentionOptions all;
    all.causal = false;
    all.scale = 0.3;
    test::expect_close(ops::attention_over_cache(q, k, v, 0.3, chunk), ops::attention(q, k, v, all, nullptr), 1e-13,
                       1e-13, "chunked");
  }
}

TEST(Attention, FullyMaskedRowsGiveZeroOutputAndMinusInfLse) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Keys start at global position 3: queries 0..2 see nothing.
  const ops::AttentionOptions opt{0, true, 0, 0, 3};
  Tensor lse;
  const Tensor out = ops::attention(test::randn({1, 5, 2, 4}, seed), test::randn({1, 4, 1, 4}, seed + 1),
                                    test::randn({1, 4, 1, 4}, seed + 2), opt, &lse);
  const auto ov = out.to_vector<double>(), lv = lse.to_vector<double>();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 5; ++i) {
      const bool masked = i < 3;
      EXPECT_EQ(std::isinf(lv[size_t(h * 5 + i)]), masked) << "head " << h << " row " << i;
      for (int64_t d = 0; d < 4; ++d) {
        const double o = ov[size_t((i * 2 + h) * 4 + d)];
        if (masked)
          EXPECT_EQ(o, 0.0);
        else
          EXPECT_NE(o, 0.0);
      }
    }
}

TEST(Attention, GradientsOfQKV) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    test::GradCheck check;
    check.inputs = {test::randn({c.B, c.Tq, c.Hq, c.Dh}, seed), test::randn({c.B, c.Tk, c.Hkv, c.Dh}, seed + 1),
                    test::randn({c.B, c.Tk, c.Hkv, c.Dh}, seed + 2)};
    check.names = {"q", "k", "v"};
    check.forward = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::attention(in[0], in[1], in[2], c.opt, nullptr)};
    };
    check.backward = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
      Tensor lse;
      const Tensor out = ops::attention(in[0], in[1], in[2], c.opt, &lse);
      Tensor dq, dk, dv;
      ops::attention_backward(dout[0], in[0], in[1], in[2], out, lse, c.opt, &dq, &dk, &dv);
      return std::vector<Tensor>{dq, dk, dv};
    };
    // Central differences with h = 1e-6 on O(1) smooth functions: truncation ~1e-12, cancellation ~1e-10.
    check.tolerance = 1e-7;
    test::run_gradcheck(check, seed);
  }
}

TEST(Attention, F32BackwardMatchesF64) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Case& c = kCases[3];
  const Tensor q = test::randn({c.B, c.Tq, c.Hq, c.Dh}, seed), k = test::randn({c.B, c.Tk, c.Hkv, c.Dh}, seed + 1);
  const Tensor v = test::randn({c.B, c.Tk, c.Hkv, c.Dh}, seed + 2),
               dout = test::randn({c.B, c.Tq, c.Hq, c.Dh}, seed + 3);
  auto grads = [&](DType dt) {
    Tensor lse, dq, dk, dv;
    const Tensor out = ops::attention(q.to(dt), k.to(dt), v.to(dt), c.opt, &lse);
    ops::attention_backward(dout.to(dt), q.to(dt), k.to(dt), v.to(dt), out, lse, c.opt, &dq, &dk, &dv);
    return std::vector<Tensor>{dq, dk, dv};
  };
  const auto g64 = grads(DType::F64), g32 = grads(DType::F32);
  // f32 inputs, out and lse (2^-24 relative each) feed double sums: gradients agree to ~1e-6.
  for (int i = 0; i < 3; ++i)
    test::expect_close(g32[size_t(i)], g64[size_t(i)], 1e-5, 1e-5, "grad " + std::to_string(i));
}

TEST(Attention, RejectsBadArguments) {
  const Tensor q = test::randn({1, 3, 3, 4}, 1), k = test::randn({1, 3, 2, 4}, 2);
  auto expect_error = [](auto&& fn, const char* fragment) {
    try {
      fn();
      ADD_FAILURE() << "expected an error mentioning " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error([&] { ops::attention(q, k, k, {}, nullptr); }, "multiple (GQA)");
  const Tensor k1 = test::randn({1, 3, 1, 4}, 3);
  expect_error([&] { ops::attention(q, k1, k1, {0, false, 2, 0, 0}, nullptr); }, "needs causal");
  expect_error([&] { ops::attention(q, k1.to(DType::F32), k1, {}, nullptr); }, "'k'");
  const Tensor k5 = test::randn({1, 3, 1, 5}, 4);
  expect_error([&] { ops::attention(q, k5, k5, {}, nullptr); }, "head_dim");
}

}  // namespace
}  // namespace primer
