#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/functions.h"
#include "core/ops/conv1d.h"
#include "core/ops/embedding.h"
#include "core/ops/rmsnorm.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

#define EXPECT_ERROR_MENTIONS(stmt, ...)                                                        \
  do {                                                                                          \
    const std::string msg = error_of([&] { (void)(stmt); });                                    \
    for (const char* part : {__VA_ARGS__}) EXPECT_NE(msg.find(part), std::string::npos) << msg; \
  } while (0)

TEST(Embedding, GathersRowsForI32AndI64Ids) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType wt : {DType::F32, DType::F64})
    for (DType it : {DType::I32, DType::I64}) {
      const Tensor w = test::randn({11, 5}, seed, wt);
      const Tensor ids = test::rand_ints({3, 4}, seed + 1, 0, 11, it);
      const Tensor y = ops::embedding(w, ids);
      ASSERT_EQ(y.shape(), (Shape{3, 4, 5}));
      const auto wv = w.to_vector<double>(), yv = y.to_vector<double>();
      const auto iv = ids.to_vector<int64_t>();
      for (size_t n = 0; n < iv.size(); ++n)
        for (int d = 0; d < 5; ++d) EXPECT_EQ(yv[n * 5 + d], wv[size_t(iv[n]) * 5 + d]);
    }
}

TEST(Embedding, GradientWrtWeightWithRepeatedIds) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor ids = test::rand_ints({4, 6}, seed + 1, 0, 5, DType::I64);  // 24 tokens over 5 ids: repeats
  test::GradCheck check;
  check.inputs = {test::randn({5, 3}, seed)};
  check.names = {"weight"};
  check.forward = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::embedding(in[0], ids)}; };
  check.backward = [&](const std::vector<Tensor>&, const std::vector<Tensor>& g) {
    const Tensor dw = Tensor::zeros({5, 3}, DType::F64);
    ops::embedding_backward(g[0], ids, dw);
    return std::vector<Tensor>{dw};
  };
  test::run_gradcheck(check, seed);
}

TEST(Embedding, BackwardAccumulatesIntoTheGivenGradient) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Tensor ids = test::rand_ints({7}, seed, 0, 4, DType::I32);
  const Tensor dy = test::randn({7, 3}, seed + 1, DType::F32);
  const Tensor dw = test::randn({4, 3}, seed + 2, DType::F32);
  std::vector<double> expected = dw.to_vector<double>();
  const auto iv = ids.to_vector<int64_t>();
  const auto gv = dy.to_vector<double>();
  for (size_t n = 0; n < iv.size(); ++n)
    for (int d = 0; d < 3; ++d) expected[size_t(iv[n]) * 3 + d] += gv[n * 3 + d];
  ops::embedding_backward(dy, ids, dw);
  test::expect_close(dw, Tensor::from_vector(expected, {4, 3}, DType::F64), 1e-6, 1e-5, "accumulated dweight");
}

TEST(Embedding, RejectsBadArguments) {
  const Tensor w = Tensor::zeros({10, 4}, DType::F32);
  EXPECT_ERROR_MENTIONS(ops::embedding(w, Tensor::from_vector(std::vector<int64_t>{3, 10, 1}, {3}, DType::I64)),
                        "'ids'", "holds 10", "position 1", "[0, 10)");
  EXPECT_ERROR_MENTIONS(ops::embedding(w, Tensor::from_vector(std::vector<int64_t>{-1}, {1}, DType::I32)), "holds -1");
  EXPECT_ERROR_MENTIONS(ops::embedding(w, Tensor::zeros({3}, DType::F32)), "'ids'", "i32/i64");
  EXPECT_ERROR_MENTIONS(ops::embedding(Tensor::zeros({10}, DType::F32), Tensor::zeros({3}, DType::I32)), "'weight'");
  const Tensor ids = Tensor::zeros({3}, DType::I32);
  EXPECT_ERROR_MENTIONS(ops::embedding_backward(Tensor::zeros({3, 5}, DType::F32), ids, w), "'dy'", "[3, 4]");
  EXPECT_ERROR_MENTIONS(
      ops::embedding_backward(Tensor::zeros({3, 4}, DType::F32), ids, Tensor::zeros({10, 4}, DType::F64)),
      "'dweight_accum'", "f32");
}

// ---- causal conv1d ----

struct ConvInputs {
  Tensor x, w, bias, state;
};

ConvInputs conv_inputs(int64_t B, int64_t T, int64_t C, int K, uint64_t seed, DType dt = DType::F64) {
  return {test::randn({B, T, C}, seed, dt), test::randn({C, K}, seed + 1, dt, Device::cpu(), 0.5),
          test::randn({C}, seed + 2, dt), test::randn({B, C, K - 1}, seed + 3, dt)};
}

TEST(CausalConv1d, ForwardMatchesTheDirectFormula) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T = 6, C = 3;
  const int K = 4;
  const ConvInputs in = conv_inputs(B, T, C, K, seed);
  for (bool silu : {false, true})
    for (bool with_state : {false, true}) {
      Tensor state_out;
      const Tensor y = ops::causal_conv1d(in.x, in.w, in.bias, silu, with_state ? in.state : Tensor(), &state_out);
      const auto x = in.x.to_vector<double>(), w = in.w.to_vector<double>(), bias = in.bias.to_vector<double>(),
                 st = in.state.to_vector<double>(), yv = y.to_vector<double>(), so = state_out.to_vector<double>();
      auto input = [&](int64_t b, int64_t s, int64_t c) {  // position s of the sequence extended by the state
        if (s >= 0) return x[size_t((b * T + s) * C + c)];
        return with_state ? st[size_t((b * C + c) * (K - 1) + (K - 1 + s))] : 0.0;
      };
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) {
          for (int64_t t = 0; t < T; ++t) {
            double z = bias[size_t(c)];
            for (int k = 0; k < K; ++k) z += w[size_t(c * K + k)] * input(b, t - (K - 1) + k, c);
            if (silu) z = z / (1 + std::exp(-z));
            EXPECT_NEAR(yv[size_t((b * T + t) * C + c)], z, 1e-12);
          }
          for (int j = 0; j < K - 1; ++j)
            EXPECT_EQ(so[size_t((b * C + c) * (K - 1) + j)], input(b, T - (K - 1) + j, c));
        }
    }
}

// Checks dx, dw, dbias and dstate_in against finite differences of (y, state_out).
void conv_gradcheck(int64_t T, int K, bool silu, uint64_t seed) {
  const int64_t B = 2, C = 3;
  const ConvInputs in = conv_inputs(B, T, C, K, seed);
  test::GradCheck check;
  check.inputs = {in.x, in.w, in.bias, in.state};
  check.names = {"x", "w", "bias", "state_in"};
  check.forward = [&](const std::vector<Tensor>& v) {
    Tensor state_out;
    Tensor y = ops::causal_conv1d(v[0], v[1], v[2], silu, v[3], &state_out);
    return std::vector<Tensor>{y, state_out};
  };
  check.backward = [&](const std::vector<Tensor>& v, const std::vector<Tensor>& g) {
    const Tensor dw = Tensor::zeros({C, K}, DType::F64), db = Tensor::zeros({C}, DType::F64);
    Tensor dstate;
    Tensor dx = ops::causal_conv1d_backward(g[0], v[0], v[1], v[2], silu, v[3], g[1], dw, db, &dstate);
    return std::vector<Tensor>{dx, dw, db, dstate};
  };
  test::run_gradcheck(check, seed);
}

// The conv with each head of its output L2-normalised (GDN's and GKA's q and k): its value is the conv then the norm,
// and its autograd node's backward (the norm's from its output, then the conv's) matches finite differences for x,
// w, bias and state_in, with gradients arriving at y and at the final state.
TEST(CausalConv1d, HeadNormalisedGradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T = 6, D = 3, C = 2 * D;
  const int K = 4;
  const double eps = 1e-3;
  const ConvInputs in = conv_inputs(B, T, C, K, seed);
  for (bool silu : {false, true}) {
    SCOPED_TRACE(silu ? "silu" : "no silu");
    Tensor state_out, rstd, plain_state;
    const Tensor y = ops::causal_conv1d_l2(in.x, in.w, in.bias, silu, in.state, &state_out, D, eps, &rstd);
    const Tensor conv = ops::causal_conv1d(in.x, in.w, in.bias, silu, in.state, &plain_state);
    Tensor r;
    const Tensor normed = ops::rmsnorm(conv.view({B, T, C / D, D}), Tensor(), Tensor(),
                                       ops::NormSpec{eps, ops::NormGate::None, true}, &r);
    test::expect_close(y, normed.view({B, T, C}), 1e-15, 1e-15, "y");
    test::expect_close(rstd, r, 1e-15, 1e-15, "rstd");
    test::expect_close(state_out, plain_state, 0, 0, "state_out");

    test::GradCheck check;
    check.inputs = {in.x, in.w, in.bias, in.state};
    check.names = {"x", "w", "bias", "state_in"};
    check.forward = [&](const std::vector<Tensor>& v) {
      Tensor st;
      const Tensor out = ops::causal_conv1d_l2(v[0], v[1], v[2], silu, v[3], &st, D, eps, nullptr);
      return std::vector<Tensor>{out, st};
    };
    check.backward = [&](const std::vector<Tensor>& v, const std::vector<Tensor>& g) {
      std::vector<ag::Var> leaves;
      for (const Tensor& t : v) leaves.push_back(ag::leaf(t));
      ag::Var so;
      const ag::Var out = ag::causal_conv1d_l2(leaves[0], leaves[1], leaves[2], silu, leaves[3], &so, D, eps);
      out->grad = g[0];
      so->grad = g[1];
      ag::current_tape().backward();
      return std::vector<Tensor>{leaves[0]->grad, leaves[1]->grad, leaves[2]->grad, leaves[3]->grad};
    };
    test::run_gradcheck(check, seed);
  }
  EXPECT_ERROR_MENTIONS(ops::causal_conv1d_l2(in.x, in.w, in.bias, true, in.state, nullptr, 4, eps, nullptr),
                        "causal_conv1d_l2", "head_dim 4", "6 channels");
}

TEST(CausalConv1d, GradientsShortSequence) {  // T < K-1: state_out reaches into state_in
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (bool silu : {false, true}) conv_gradcheck(2, 4, silu, seed);
}

TEST(CausalConv1d, GradientsLongSequence) {  // T > K
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (bool silu : {false, true})
    for (int K : {2, 4}) conv_gradcheck(9, K, silu, seed);
}

TEST(CausalConv1d, ChunkedCallsChainThroughTheState) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T = 11, C = 5, T1 = 4;
  const int K = 4;
  const ConvInputs in = conv_inputs(B, T, C, K, seed);
  const Tensor dy = test::randn({B, T, C}, seed + 9), dstate_out = test::randn({B, C, K - 1}, seed + 10);
  // Whole sequence, forward and backward.
  Tensor state, dstate;
  const Tensor y = ops::causal_conv1d(in.x, in.w, in.bias, true, in.state, &state);
  const Tensor dw = Tensor::zeros({C, K}, DType::F64), db = Tensor::zeros({C}, DType::F64);
  const Tensor dx = ops::causal_conv1d_backward(dy, in.x, in.w, in.bias, true, in.state, dstate_out, dw, db, &dstate);
  // Two chunks [0, T1) and [T1, T): the state carries forward, its gradient carries backward.
  const Tensor x1 = in.x.slice(1, 0, T1), x2 = in.x.slice(1, T1, T);
  Tensor state1, state2, dstate1, dstate2;
  const Tensor y1 = ops::causal_conv1d(x1, in.w, in.bias, true, in.state, &state1);
  const Tensor y2 = ops::causal_conv1d(x2, in.w, in.bias, true, state1, &state2);
  const Tensor dw_c = Tensor::zeros({C, K}, DType::F64), db_c = Tensor::zeros({C}, DType::F64);
  const Tensor dx2 = ops::causal_conv1d_backward(dy.slice(1, T1, T), x2, in.w, in.bias, true, state1, dstate_out, dw_c,
                                                 db_c, &dstate2);
  const Tensor dx1 =
      ops::causal_conv1d_backward(dy.slice(1, 0, T1), x1, in.w, in.bias, true, in.state, dstate2, dw_c, db_c, &dstate1);
  test::expect_close(y1, y.slice(1, 0, T1), 1e-14, 1e-13, "y of chunk 1");
  test::expect_close(y2, y.slice(1, T1, T), 1e-14, 1e-13, "y of chunk 2");
  test::expect_close(state2, state, 0, 0, "state_out");
  test::expect_close(dx1, dx.slice(1, 0, T1), 1e-13, 1e-12, "dx of chunk 1");
  test::expect_close(dx2, dx.slice(1, T1, T), 1e-13, 1e-12, "dx of chunk 2");
  test::expect_close(dstate1, dstate, 1e-13, 1e-12, "dstate_in");
  test::expect_close(dw_c, dw, 1e-13, 1e-12, "dw");
  test::expect_close(db_c, db, 1e-13, 1e-12, "dbias");
}

TEST(CausalConv1d, RejectsBadArguments) {
  const Tensor x = Tensor::zeros({2, 5, 3}, DType::F32), w = Tensor::zeros({3, 4}, DType::F32);
  EXPECT_ERROR_MENTIONS(ops::causal_conv1d(x, Tensor::zeros({4, 4}, DType::F32), {}, false, {}, nullptr), "'w'",
                        "[4, 4]", "C = 3");
  EXPECT_ERROR_MENTIONS(ops::causal_conv1d(x, Tensor::zeros({3, 9}, DType::F32), {}, false, {}, nullptr), "'w'",
                        "2..8");
  EXPECT_ERROR_MENTIONS(ops::causal_conv1d(x, w, Tensor::zeros({3}, DType::F64), false, {}, nullptr), "'bias'", "f32");
  EXPECT_ERROR_MENTIONS(ops::causal_conv1d(x, w, {}, false, Tensor::zeros({2, 3, 4}, DType::F32), nullptr),
                        "'state_in'", "[2, 3, 3]");
  EXPECT_ERROR_MENTIONS(ops::causal_conv1d(Tensor::zeros({5, 3}, DType::F32), w, {}, false, {}, nullptr), "'x'",
                        "[B, T, C]");
  EXPECT_ERROR_MENTIONS(
      ops::causal_conv1d_backward(x, x, w, {}, false, {}, {}, Tensor::zeros({3, 4}, DType::F64), {}, nullptr),
      "'dw_accum'", "f32");
  EXPECT_ERROR_MENTIONS(ops::causal_conv1d_backward(Tensor::zeros({2, 4, 3}, DType::F32), x, w, {}, false, {}, {},
                                                    Tensor::zeros({3, 4}, DType::F32), {}, nullptr),
                        "'dy'", "[2, 5, 3]");
}

}  // namespace
}  // namespace primer
