// The A5 word-problem generator (tools/synthetic/a5_task.h): the 60 elements form the alternating group under the
// composition table (identity, inverses, associativity, closure, not commutative), and every label is the running
// product recomputed from the permutations themselves.
#include <gtest/gtest.h>

#include <set>

#include "tools/synthetic/a5_task.h"

using namespace primer;
using namespace primer::synthetic;

namespace {

Permutation5 compose(const Permutation5& a, const Permutation5& b) {
  Permutation5 ab;
  for (size_t x = 0; x < 5; ++x) ab[x] = a[size_t(b[x])];
  return ab;
}

}  // namespace

TEST(A5Task, SixtyEvenPermutationsIdentityFirst) {
  const std::vector<Permutation5>& e = a5_elements();
  ASSERT_EQ(int64_t(e.size()), kA5Order);
  EXPECT_EQ(e[0], (Permutation5{0, 1, 2, 3, 4}));
  EXPECT_EQ(std::set<Permutation5>(e.begin(), e.end()).size(), e.size());
  for (const Permutation5& p : e) {
    int inversions = 0;
    for (size_t i = 0; i < 5; ++i)
      for (size_t j = i + 1; j < 5; ++j) inversions += p[i] > p[j];
    EXPECT_EQ(inversions % 2, 0);
  }
}

TEST(A5Task, TheTableIsAGroupThatDoesNotCommute) {
  const std::vector<Permutation5>& e = a5_elements();
  bool commutes = true;
  for (int32_t a = 0; a < kA5Order; ++a) {
    EXPECT_EQ(a5_compose(0, a), a);
    EXPECT_EQ(a5_compose(a, 0), a);
    int inverses = 0;
    for (int32_t b = 0; b < kA5Order; ++b) {
      const int32_t ab = a5_compose(a, b);
      ASSERT_GE(ab, 0);
      ASSERT_LT(ab, kA5Order);
      EXPECT_EQ(e[size_t(ab)], compose(e[size_t(a)], e[size_t(b)]));
      inverses += ab == 0;
      commutes = commutes && ab == a5_compose(b, a);
      for (int32_t c = 0; c < kA5Order; c += 7) EXPECT_EQ(a5_compose(ab, c), a5_compose(a, a5_compose(b, c)));
    }
    EXPECT_EQ(inverses, 1) << "element " << a;
  }
  EXPECT_FALSE(commutes);
}

TEST(A5Task, EachLabelIsTheRunningProduct) {
  const std::vector<Permutation5>& e = a5_elements();
  const LabelledSet set = make_a5_set(40, 17, 5);
  ASSERT_EQ(set.count, 40);
  ASSERT_EQ(set.seq, 17);
  EXPECT_EQ(set.labelled(), 40 * 17);
  std::set<int32_t> seen;
  for (int64_t s = 0; s < set.count; ++s) {
    Permutation5 product = e[0];
    for (int64_t t = 0; t < set.seq; ++t) {
      const int32_t g = set.ids[size_t(s * set.seq + t)];
      ASSERT_GE(g, 0);
      ASSERT_LT(g, kA5Order);
      seen.insert(g);
      product = compose(e[size_t(g)], product);
      EXPECT_EQ(e[size_t(set.labels[size_t(s * set.seq + t)])], product) << "sequence " << s << ", position " << t;
    }
  }
  EXPECT_EQ(int64_t(seen.size()), kA5Order);  // every element drawn (a fixed seed: 680 draws, deterministic)
}

TEST(A5Task, SameSeedSameDataOtherSeedOtherData) {
  EXPECT_EQ(make_a5_set(10, 9, 3).ids, make_a5_set(10, 9, 3).ids);
  EXPECT_NE(make_a5_set(10, 9, 3).ids, make_a5_set(10, 9, 4).ids);
  const SyntheticData data = make_a5_data(12, 30, 10, {1, 2}, 7);
  EXPECT_EQ(data.vocab, kA5Order);
  ASSERT_EQ(data.evaluation.size(), 2u);
  EXPECT_EQ(data.evaluation[1].seq, 24);
  EXPECT_NE(data.train.ids, data.val.ids);
}
