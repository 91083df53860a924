// ops::lse_merge against its f64 reference (including rows the second part does not see), and the autograd node
// ag::merged_attention: two windows merged into one softmax equal one attention over the union of their keys, in
// values and in every gradient, and its gradients match finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/autograd/functions.h"
#include "core/autograd/merged_attention.h"
#include "core/ops/lse_merge.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

TEST(LseMerge, MatchesTheF64Reference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T = 5, H = 3, Dh = 4;
  for (const DType dt : {DType::F64, DType::F32}) {
    const Tensor out_a = test::randn({B, T, H, Dh}, seed, dt), out_b = test::randn({B, T, H, Dh}, seed + 1, dt);
    const Tensor lse_a = test::rand_uniform({B, H, T}, seed + 2, -30, 30, dt);
    Tensor lse_b = test::rand_uniform({B, H, T}, seed + 3, -30, 30, dt);
    // Part b sees no key on the first two rows: its output rows are 0 and its lse −inf.
    out_b.slice(1, 0, 2).zero_();
    lse_b.slice(2, 0, 2).fill_(-std::numeric_limits<double>::infinity());
    Tensor lse, lse_ref;
    const Tensor out = ops::lse_merge(out_a, lse_a, out_b, lse_b, &lse);
    const Tensor ref = ops::reference::lse_merge(out_a, lse_a, out_b, lse_b, &lse_ref);
    EXPECT_EQ(out.dtype(), dt);
    // A few ulp of the dtype relative to the largest magnitude (|lse| reaches 30).
    const double tol = dt == DType::F64 ? 1e-14 : 1e-6;
    auto largest = [](const Tensor& t) {
      double m = 0;
      for (double e : t.to_vector<double>()) m = std::isfinite(e) ? std::max(m, std::abs(e)) : m;
      return m;
    };
    test::expect_close(out, ref, tol, tol * largest(ref), "out");
    test::expect_close(lse, lse_ref, tol, tol * largest(lse_ref), "lse");
    test::expect_close(out.slice(1, 0, 2), out_a.slice(1, 0, 2), 0, 0, "rows part b does not see");
  }
}

struct Parts {
  Tensor q, k, v;
};

// Query p sees keys (p − W, p] as part a and the same keys shifted by W, (p − 2W, p − W], as part b: together the
// window of 2W.
ag::Var windows(const ag::Var& q, const ag::Var& k, const ag::Var& v, int64_t W, int64_t first) {
  ops::AttentionOptions a;
  a.window = W;
  a.q_offset = a.k_offset = first;
  ops::AttentionOptions b = a;
  b.k_offset = first + W;
  return ag::merged_attention({q, k, v, a}, {q, k, v, b});
}

TEST(MergedAttention, TwoWindowsAreOneSoftmaxOverTheirUnion) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T = 11, Hq = 4, Hkv = 2, Dh = 4, W = 3;
  const Tensor q = test::randn({B, T, Hq, Dh}, seed), k = test::randn({B, T, Hkv, Dh}, seed + 1),
               v = test::randn({B, T, Hkv, Dh}, seed + 2), dout = test::randn({B, T, Hq, Dh}, seed + 3);
  std::vector<Tensor> got, want;
  for (const bool merged : {true, false}) {
    const ag::Var qv = ag::leaf(q), kv = ag::leaf(k), vv = ag::leaf(v);
    ops::AttentionOptions union_of_both;
    union_of_both.window = 2 * W;
    union_of_both.q_offset = union_of_both.k_offset = 7;
    const ag::Var out = merged ? windows(qv, kv, vv, W, 7) : ag::attention(qv, kv, vv, union_of_both);
    ag::backward(out, dout);
    (merged ? got : want) = std::vector<Tensor>{out->value, qv->grad, kv->grad, vv->grad};
  }
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < got.size(); ++i) test::expect_close(got[i], want[i], 1e-13, 1e-13, names[i]);
}

// Different queries and keys in the two parts (B'MOJO-F's untied fading path), against finite differences.
TEST(MergedAttention, GradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  const int64_t B = 1, T = 7, Hq = 2, Hkv = 1, Dh = 4, W = 2;
  test::GradCheck check;
  for (int i = 0; i < 2; ++i) {
    check.inputs.push_back(test::randn({B, T, Hq, Dh}, seed + 10 * uint64_t(i)));
    check.inputs.push_back(test::randn({B, T, Hkv, Dh}, seed + 10 * uint64_t(i) + 1));
    check.inputs.push_back(test::randn({B, T, Hkv, Dh}, seed + 10 * uint64_t(i) + 2));
  }
  check.names = {"q", "k", "v", "q_f", "k_f", "v_f"};
  auto run = [&](const std::vector<Tensor>& in, bool record, std::vector<ag::Var>* leaves) {
    for (const Tensor& t : in) leaves->push_back(record ? ag::leaf(t) : ag::constant(t));
    ops::AttentionOptions a;
    a.window = W;
    ops::AttentionOptions b = a;
    b.k_offset = W;
    const auto& l = *leaves;
    return ag::merged_attention({l[0], l[1], l[2], a}, {l[3], l[4], l[5], b});
  };
  check.forward = [&](const std::vector<Tensor>& in) {
    ag::NoGrad no_grad;
    std::vector<ag::Var> leaves;
    return std::vector<Tensor>{run(in, false, &leaves)->value};
  };
  check.backward = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& gout) {
    std::vector<ag::Var> leaves;
    ag::backward(run(in, true, &leaves), gout[0]);
    std::vector<Tensor> grads;
    for (const ag::Var& l : leaves) grads.push_back(l->grad);
    return grads;
  };
  test::run_gradcheck(check, seed + 100);
}

}  // namespace
}  // namespace primer
