// The MQAR generator (tools/synthetic/mqar_task.h): layout of pairs, queries and labels, determinism, the
// extrapolation sets' shared pairs; --mixers parsing (KDA). (Training is smoke-tested by hand: even a tiny run takes
// far longer than a CI test may.)
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/check.h"
#include "tools/synthetic/mqar_task.h"
#include "tools/synthetic/synthetic_train.h"

using namespace primer;
using namespace primer::synthetic;

namespace {

const MqarSpec kSpec{.vocab = 64, .pairs = 4, .seq = 48, .query_start = 12};

std::string error_of(const MqarSpec& spec) {
  try {
    make_mqar_set(spec, 1, 1, 1);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(MqarTask, PairsComeFirstWithKeysBelowAndValuesAboveHalf) {
  const LabelledSet set = make_mqar_set(kSpec, 50, 7, 8);
  ASSERT_EQ(set.ids.size(), size_t(50 * kSpec.seq));
  for (int64_t i = 0; i < set.count; ++i) {
    const int32_t* ids = set.ids.data() + i * set.seq;
    const int32_t* labels = set.labels.data() + i * set.seq;
    for (int64_t j = 0; j < kSpec.pairs; ++j) {
      EXPECT_GE(ids[2 * j], 0);
      EXPECT_LT(ids[2 * j], kSpec.vocab / 2);
      EXPECT_GE(ids[2 * j + 1], kSpec.vocab / 2);
      EXPECT_LT(ids[2 * j + 1], kSpec.vocab);
    }
    for (int64_t t = 0; t < set.seq; ++t) {
      EXPECT_GE(ids[t], 0);
      EXPECT_LT(ids[t], kSpec.vocab);
      if (t < kSpec.query_start || t > kSpec.seq - 2) {
        EXPECT_EQ(labels[t], kIgnoreLabel) << "position " << t;
      }
    }
  }
}

TEST(MqarTask, EachLabelIsTheValueOfTheKeyAtItsPosition) {
  const LabelledSet set = make_mqar_set(kSpec, 200, 3, 4);
  int64_t labelled = 0;
  for (int64_t i = 0; i < set.count; ++i) {
    const int32_t* ids = set.ids.data() + i * set.seq;
    const int32_t* labels = set.labels.data() + i * set.seq;
    int64_t in_row = 0;
    for (int64_t t = 0; t < set.seq; ++t) {
      if (labels[t] == kIgnoreLabel) continue;
      ++in_row;
      bool found = false;  // keys are drawn with replacement: any pair of that key may be the one queried
      for (int64_t j = 0; j < kSpec.pairs; ++j) found |= ids[2 * j] == ids[t] && ids[2 * j + 1] == labels[t];
      EXPECT_TRUE(found) << "sequence " << i << " position " << t;
    }
    EXPECT_GE(in_row, 1);
    EXPECT_LE(in_row, kSpec.pairs);  // colliding queries overwrite each other
    labelled += in_row;
  }
  EXPECT_EQ(labelled, set.labelled());
  EXPECT_GT(labelled, 200 * kSpec.pairs * 8 / 10);  // collisions are rare over 35 positions
}

TEST(MqarTask, QueriesSpreadOverTheWholeRange) {
  const LabelledSet set = make_mqar_set(kSpec, 500, 5, 6);
  std::set<int64_t> positions;
  for (size_t p = 0; p < set.labels.size(); ++p)
    if (set.labels[p] != kIgnoreLabel) positions.insert(int64_t(p) % set.seq);
  EXPECT_EQ(*positions.begin(), kSpec.query_start);
  EXPECT_EQ(*positions.rbegin(), kSpec.seq - 2);
  EXPECT_EQ(int64_t(positions.size()), kSpec.seq - 1 - kSpec.query_start);  // α = 0.1 is close to uniform
}

TEST(MqarTask, ExtrapolationSetsKeepEachSequencesPairs) {
  MqarSpec longer = kSpec;
  longer.seq = 4 * kSpec.seq;
  const LabelledSet a = make_mqar_set(kSpec, 20, 11, 12), b = make_mqar_set(longer, 20, 11, 13);
  bool noise_differs = false;
  for (int64_t i = 0; i < 20; ++i) {
    for (int64_t t = 0; t < 2 * kSpec.pairs; ++t) EXPECT_EQ(a.ids[size_t(i * a.seq + t)], b.ids[size_t(i * b.seq + t)]);
    for (int64_t t = 2 * kSpec.pairs; t < kSpec.query_start; ++t)
      noise_differs |= a.ids[size_t(i * a.seq + t)] != b.ids[size_t(i * b.seq + t)];
  }
  EXPECT_TRUE(noise_differs);
}

TEST(MqarTask, SameSeedsSameDataOtherSeedsOtherData) {
  const LabelledSet a = make_mqar_set(kSpec, 10, 1, 2), b = make_mqar_set(kSpec, 10, 1, 2);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.labels, b.labels);
  const LabelledSet other_pairs = make_mqar_set(kSpec, 10, 9, 2), other_layout = make_mqar_set(kSpec, 10, 1, 9);
  EXPECT_NE(a.ids, other_pairs.ids);
  EXPECT_NE(a.ids, other_layout.ids);
  EXPECT_NE(a.labels, other_layout.labels);
}

TEST(MqarTask, BadSpecsNameTheFlag) {
  MqarSpec s = kSpec;
  s.query_start = 2 * s.pairs - 1;
  EXPECT_NE(error_of(s).find("--query-start"), std::string::npos) << error_of(s);
  s = kSpec;
  s.seq = s.query_start + 1;
  EXPECT_NE(error_of(s).find("--seq"), std::string::npos) << error_of(s);
  s = kSpec;
  s.vocab = 7;
  EXPECT_NE(error_of(s).find("--vocab"), std::string::npos) << error_of(s);
}

namespace primer {
namespace {

// --mixers: pattern tokens, and KDA as GDN2 with one gate per head (gdn2.kda_gates) in the models it builds.
TEST(SyntheticMixers, KdaIsGdn2WithOneGatePerHead) {
  const std::vector<synthetic::SyntheticMixer> mixers = synthetic::parse_mixer_list("GDN,KDA,GDN2");
  ASSERT_EQ(mixers.size(), 3u);
  EXPECT_EQ(mixers[0].name(), "GDN");
  EXPECT_EQ(mixers[1].name(), "KDA");
  EXPECT_EQ(mixers[2].name(), "GDN2");
  const ModelConfig kda = synthetic::synthetic_model_config(mixers[1], {}, 64, 32);
  const ModelConfig gdn2 = synthetic::synthetic_model_config(mixers[2], {}, 64, 32);
  EXPECT_EQ(kda.layer_types, gdn2.layer_types);
  EXPECT_TRUE(kda.gdn2.kda_gates);
  EXPECT_FALSE(gdn2.gdn2.kda_gates);
  EXPECT_THROW(synthetic::parse_mixer_list("GDN,KDB"), Error);
}

}  // namespace
}  // namespace primer
