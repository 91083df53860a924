// The in-context recall generator (tools/synthetic/recall_task.h): keys and values in their halves, one value per
// key within a sequence, training labels as next tokens, evaluation labels exactly at repeated keys, determinism.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "tools/synthetic/recall_task.h"

using namespace primer::synthetic;

namespace {

const RecallSpec kSpec{.vocab = 32, .seq = 64};

}  // namespace

TEST(RecallTask, EachKeyKeepsOneValueWithinASequenceAndTheMappingChangesAcrossSequences) {
  const LabelledSet set = make_recall_set(kSpec, 100, 5, false);
  ASSERT_EQ(set.ids.size(), size_t(100 * kSpec.seq));
  std::set<std::pair<int32_t, int32_t>> pairs_everywhere;
  for (int64_t i = 0; i < set.count; ++i) {
    const int32_t* ids = set.ids.data() + i * set.seq;
    std::map<int32_t, int32_t> value_of;
    for (int64_t j = 0; j < kSpec.seq / 2; ++j) {
      const int32_t key = ids[2 * j], value = ids[2 * j + 1];
      EXPECT_GE(key, 0);
      EXPECT_LT(key, kSpec.vocab / 2);
      EXPECT_GE(value, kSpec.vocab / 2);
      EXPECT_LT(value, kSpec.vocab);
      const auto [it, first] = value_of.emplace(key, value);
      EXPECT_EQ(it->second, value) << "sequence " << i << " pair " << j;
      pairs_everywhere.insert({key, value});
    }
  }
  // 16 keys × 16 values: a fixed mapping would show 16 distinct pairs; fresh mappings show nearly all 256.
  EXPECT_GT(pairs_everywhere.size(), 200u);
}

TEST(RecallTask, EvaluationLabelsAreExactlyTheRepeatedKeysWithTheirValues) {
  const LabelledSet set = make_recall_set(kSpec, 100, 6, false);
  int64_t queries = 0;
  for (int64_t i = 0; i < set.count; ++i) {
    const int32_t* ids = set.ids.data() + i * set.seq;
    const int32_t* labels = set.labels.data() + i * set.seq;
    std::set<int32_t> seen;
    for (int64_t t = 0; t < set.seq; ++t) {
      const bool repeated_key = t % 2 == 0 && seen.count(ids[t]) > 0;
      EXPECT_EQ(labels[t], repeated_key ? ids[t + 1] : kIgnoreLabel) << "sequence " << i << " position " << t;
      if (t % 2 == 0) seen.insert(ids[t]);
      queries += repeated_key;
    }
  }
  EXPECT_EQ(queries, set.labelled());
  // 32 draws of 16 keys: about 32 − 16·(1 − (15/16)^32) ≈ 17.9 repeats per sequence.
  EXPECT_NEAR(double(queries) / double(set.count), 17.9, 1.5);
}

TEST(RecallTask, TrainingLabelsAreTheNextTokens) {
  const LabelledSet set = make_recall_set(kSpec, 20, 7, true);
  for (int64_t i = 0; i < set.count; ++i)
    for (int64_t t = 0; t < set.seq; ++t) {
      const int32_t expected = t + 1 < set.seq ? set.ids[size_t(i * set.seq + t + 1)] : kIgnoreLabel;
      EXPECT_EQ(set.labels[size_t(i * set.seq + t)], expected);
    }
}

TEST(RecallTask, SetsAreDeterministicAndTheRunsSetsDiffer) {
  const LabelledSet a = make_recall_set(kSpec, 10, 9, false), b = make_recall_set(kSpec, 10, 9, false);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.labels, b.labels);
  const SyntheticData data = make_recall_data(kSpec, 10, 10, 9);
  EXPECT_EQ(data.vocab, kSpec.vocab);
  ASSERT_EQ(data.evaluation.size(), 1u);
  EXPECT_NE(data.train.ids, data.val.ids);
  EXPECT_NE(data.val.ids, data.evaluation[0].ids);
  EXPECT_EQ(data.train.labelled(), 10 * (kSpec.seq - 1));
}

TEST(RecallTask, RejectsBadSpecsNamingTheFlag) {
  const auto error_of = [](const RecallSpec& spec) -> std::string {
    try {
      make_recall_set(spec, 1, 1, false);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of({.vocab = 31, .seq = 64}).find("--vocab 31"), std::string::npos);
  EXPECT_NE(error_of({.vocab = 32, .seq = 63}).find("--seq 63"), std::string::npos);
}
