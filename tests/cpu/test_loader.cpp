// The loader: packing invariants, targets and loss masks, mixing frequencies (plain and length-weighted),
// sequence-parallel splits, held-out split, and exact resume (also onto another data-parallel size).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "data/loader.h"
#include "data/packing.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"
#include "tests/support/token_data.h"

namespace primer::data {
namespace {

using test::ScratchDir;
using test::SyntheticDoc;

constexpr int32_t kSourceStride = 1000000;  // source s's token ids lie in [s·stride, (s+1)·stride)

// Documents whose token ids are unique across the corpus (so an id identifies document and position).
struct Fixture {
  ScratchDir dir;
  std::vector<SyntheticDoc> docs;
  std::map<int32_t, std::pair<size_t, size_t>> where;  // id → (document, position)
  TokenCorpus corpus;

  Fixture(const std::string& name, uint64_t seed, std::vector<SyntheticDoc> documents, int sources)
      : dir(name, seed), docs(std::move(documents)), corpus(open(dir, docs, sources)) {
    for (size_t d = 0; d < docs.size(); ++d)
      for (size_t i = 0; i < docs[d].tokens.size(); ++i) where[docs[d].tokens[i]] = {d, i};
  }
  static TokenCorpus open(const ScratchDir& dir, const std::vector<SyntheticDoc>& docs, int sources) {
    test::write_token_data(dir / "data", docs, sources, 4096);
    return TokenCorpus::open({dir / "data"}, true);
  }
  uint8_t mask_of(int32_t id) const {
    const auto [d, i] = where.at(id);
    return docs[d].mask.empty() ? 1 : docs[d].mask[i];
  }
};

// `count` documents per source with lengths drawn from [min_len, max_len], unique ids, optional random masks.
std::vector<SyntheticDoc> make_docs(uint64_t seed, const std::vector<int>& count, const std::vector<int>& min_len,
                                    const std::vector<int>& max_len, bool masks) {
  std::mt19937_64 rng(seed);
  std::vector<SyntheticDoc> docs;
  std::vector<int32_t> next(count.size());
  for (size_t s = 0; s < count.size(); ++s) next[s] = int32_t(s) * kSourceStride;
  // Interleave sources in the file so that source and position are unrelated.
  std::vector<int> left = count;
  for (int remaining = std::accumulate(count.begin(), count.end(), 0); remaining > 0; --remaining) {
    size_t s;
    do s = size_t(rng() % count.size());
    while (left[s] == 0);
    --left[s];
    SyntheticDoc d;
    d.source = int32_t(s);
    d.tokens.resize(size_t(min_len[s] + int(rng() % uint64_t(max_len[s] - min_len[s] + 1))));
    for (int32_t& t : d.tokens) t = next[s]++;
    if (masks) {
      d.mask.resize(d.tokens.size());
      for (uint8_t& m : d.mask) m = uint8_t(rng() % 3 != 0);
    }
    docs.push_back(std::move(d));
  }
  return docs;
}

std::vector<Batch> run(Loader& loader, int64_t steps, int64_t rows) {
  std::vector<Batch> out(static_cast<size_t>(steps));
  for (Batch& b : out) loader.next(rows, b);
  return out;
}

void expect_same(const Batch& a, const Batch& b, const std::string& what) {
  EXPECT_EQ(a.rows, b.rows) << what;
  EXPECT_EQ(a.ids, b.ids) << what;
  EXPECT_EQ(a.targets, b.targets) << what;
  EXPECT_EQ(a.positions, b.positions) << what;
  EXPECT_EQ(a.segments, b.segments) << what;
}

// Rows of one epoch, taken one at a time until the cursor moves to epoch 1.
std::vector<Batch> one_epoch(Loader& loader) {
  std::vector<Batch> rows;
  while (loader.cursor().epoch == 0) loader.next(1, rows.emplace_back());
  return rows;
}

TEST(Packing, KnownExample) {
  const std::vector<int64_t> docs = {0, 1, 2, 3, 4, 5, 6}, lengths = {7, 5, 3, 3, 2, 9, 12};
  auto rows_of = [&](PackingMethod m) {
    const RowPlan plan = pack(m, docs, lengths, 10);
    std::vector<std::vector<int64_t>> rows;
    for (int64_t r = 0; r < plan.rows(); ++r) {
      auto& row = rows.emplace_back();
      int64_t used = 0;
      for (const Piece& p : plan.row(r)) row.push_back(p.doc), used += p.length;
      EXPECT_LE(used, 10);
    }
    return rows;
  };
  using Rows = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(rows_of(PackingMethod::Greedy), (Rows{{6}, {5}, {0, 3}, {1, 2, 4}}));
  EXPECT_EQ(rows_of(PackingMethod::BestFit), (Rows{{6}, {5}, {0, 2}, {1, 3, 4}}));
  EXPECT_EQ(rows_of(PackingMethod::Random), (Rows{{0}, {1, 2}, {3, 4}, {5}, {6}}));
  EXPECT_EQ(rows_of(PackingMethod::None), (Rows{{0}, {1}, {2}, {3}, {4}, {5}, {6}}));
  // Concat: 41 tokens → 4 rows of 10; document 6's last token is the dropped remainder.
  const RowPlan concat = pack(PackingMethod::Concat, docs, lengths, 10);
  ASSERT_EQ(concat.rows(), 4);
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> row1 = {{1, 3, 2}, {2, 0, 3}, {3, 0, 3}, {4, 0, 2}};
  std::vector<std::tuple<int64_t, int64_t, int64_t>> got;
  for (const Piece& p : concat.row(1)) got.emplace_back(p.doc, p.begin, p.length);
  EXPECT_EQ(got, row1);
  EXPECT_EQ(concat.row(3).back().begin + concat.row(3).back().length, 11);
}

TEST(Loader, ConcatEpochHoldsEveryTokenOnce) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Fixture f("loader-concat", seed, make_docs(seed, {70}, {1}, {90}, false), 1);
  LoaderOptions o;
  o.seq_len = 64;
  o.seed = seed;
  Loader loader(f.corpus, o);
  const std::vector<Batch> epoch = one_epoch(loader);
  ASSERT_EQ(int64_t(epoch.size()), f.corpus.tokens() / 64);
  std::set<int32_t> seen;
  for (const Batch& b : epoch) {
    for (int64_t t = 0; t < 64; ++t) {
      EXPECT_TRUE(seen.insert(b.ids[size_t(t)]).second) << "token " << b.ids[size_t(t)] << " twice";
      EXPECT_EQ(b.positions[size_t(t)], t);
      EXPECT_EQ(b.targets[size_t(t)], t + 1 < 64 ? b.ids[size_t(t + 1)] : kIgnoreIndex);  // no reset, no mask
    }
  }
  EXPECT_EQ(int64_t(seen.size()), int64_t(epoch.size()) * 64);
  EXPECT_LT(f.corpus.tokens() - int64_t(seen.size()), 64);  // only the remainder is dropped
  // Epoch 1 is another order of the same documents (the same order has probability 1/70!).
  auto all_ids = [](const std::vector<Batch>& rows) {
    std::vector<int32_t> ids;
    for (const Batch& b : rows) ids.insert(ids.end(), b.ids.begin(), b.ids.end());
    return ids;
  };
  EXPECT_NE(all_ids(run(loader, int64_t(epoch.size()), 1)), all_ids(epoch));
}

TEST(Loader, WholeDocumentPackingsNeverSplitADocument) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Fixture f("loader-bins", seed, make_docs(seed, {120}, {1}, {80}, false), 1);  // some longer than a row
  for (const PackingMethod method :
       {PackingMethod::Greedy, PackingMethod::BestFit, PackingMethod::Random, PackingMethod::None}) {
    for (const bool drop : {false, true}) {
      SCOPED_TRACE(fmt::format("{} drop {}", packing_method_name(method), drop));
      LoaderOptions o;
      o.seq_len = 48;
      o.packing = method;
      o.drop_long_documents = drop;
      o.seed = seed;
      Loader loader(f.corpus, o);
      std::map<size_t, int> placed;  // document → times placed this epoch
      for (const Batch& b : one_epoch(loader)) {
        for (int64_t t = 0; t < 48;) {
          const int32_t segment = b.segments[size_t(t)];
          if (segment < 0) {  // padding runs to the end of the row
            for (; t < 48; ++t) EXPECT_EQ(b.segments[size_t(t)], -1);
            break;
          }
          const auto [doc, first] = f.where.at(b.ids[size_t(t)]);
          EXPECT_EQ(first, 0u) << "a piece starts inside a document";
          int64_t length = 0;
          for (; t < 48 && b.segments[size_t(t)] == segment; ++t, ++length)
            ASSERT_EQ(b.ids[size_t(t)], f.docs[doc].tokens[size_t(length)]);
          const int64_t full = int64_t(f.docs[doc].tokens.size());
          EXPECT_EQ(length, std::min<int64_t>(full, 48)) << "document cut short";
          EXPECT_FALSE(drop && full > 48) << "a long document was not dropped";
          ++placed[doc];
        }
      }
      for (size_t d = 0; d < f.docs.size(); ++d) {
        const bool expected = !(drop && f.docs[d].tokens.size() > 48);
        EXPECT_EQ(placed[d], expected ? 1 : 0) << "document " << d;
      }
    }
  }
}

TEST(Loader, TargetsFollowTheLossMaskAndDocumentResets) {
  // A hand-checked row first: documents [10 11 12] (mask 1 0 1) and [20 21] (mask 1 1), greedy, row of 8.
  {
    ScratchDir dir("loader-hand", test::fresh_seed());
    test::write_token_data(dir / "d", {{{10, 11, 12}, {1, 0, 1}, 0}, {{20, 21}, {1, 1}, 0}}, 1, 100);
    const TokenCorpus corpus = TokenCorpus::open({dir / "d"}, true);
    const int32_t P = corpus.tokenizer().eos_id, X = kIgnoreIndex;
    for (const bool reset : {false, true}) {
      LoaderOptions o;
      o.seq_len = 8;
      o.packing = PackingMethod::Greedy;
      o.reset_at_document_starts = reset;
      Loader loader(corpus, o);
      Batch b;
      loader.next(1, b);
      EXPECT_EQ(b.ids, (std::vector<int32_t>{10, 11, 12, 20, 21, P, P, P}));
      EXPECT_EQ(b.segments, (std::vector<int32_t>{0, 0, 0, 1, 1, -1, -1, -1}));
      if (!reset) {
        EXPECT_EQ(b.targets, (std::vector<int32_t>{X, 12, 20, 21, X, X, X, X}));
        EXPECT_EQ(b.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
      } else {
        EXPECT_EQ(b.targets, (std::vector<int32_t>{X, 12, X, 21, X, X, X, X}));
        EXPECT_EQ(b.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 1, 2}));
      }
    }
  }
  // Then the rule on random data, every packing, both settings.
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Fixture f("loader-masks", seed, make_docs(seed, {80}, {1}, {40}, true), 1);
  for (const PackingMethod method : {PackingMethod::Concat, PackingMethod::Greedy, PackingMethod::BestFit,
                                     PackingMethod::Random, PackingMethod::None}) {
    for (const bool reset : {false, true}) {
      SCOPED_TRACE(fmt::format("{} reset {}", packing_method_name(method), reset));
      LoaderOptions o;
      o.seq_len = 32;
      o.packing = method;
      o.reset_at_document_starts = reset;
      o.seed = seed;
      Loader loader(f.corpus, o);
      for (const Batch& b : run(loader, 20, 2)) {
        for (int64_t r = 0; r < b.rows; ++r) {
          int32_t position = 0;
          for (int64_t t = 0; t < 32; ++t) {
            const size_t i = size_t(r * 32 + t);
            const bool starts = t == 0 || b.segments[i] != b.segments[i - 1];
            position = reset ? (starts ? 0 : position + 1) : int32_t(t);
            if (b.segments[i] >= 0) {
              EXPECT_EQ(b.positions[i], position) << "row " << r << " t " << t;
            }
            int32_t expected = kIgnoreIndex;
            if (t + 1 < 32 && b.segments[i + 1] >= 0 && f.mask_of(b.ids[i + 1]) &&
                !(reset && b.segments[i + 1] != b.segments[i]))
              expected = b.ids[i + 1];
            ASSERT_EQ(b.targets[i], expected) << "row " << r << " t " << t;
          }
        }
      }
    }
  }
}

// Each row holds one document (packing none), so row counts are document draws. Draws are independent with
// probability q_s, so a source's share over N rows has standard deviation sqrt(q_s(1−q_s)/N) (≤ 0.0029 at
// N = 30000); 5σ bounds a false alarm of a fresh seed below 6e-7 per check, while a loader that ignored the
// weights (shares ∝ document counts) or the length weighting would miss by more than 0.1.
TEST(Loader, MixingFrequenciesMatchTheWeightsAndTheLengthWeightedFormula) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<int> counts = {100, 300, 50};
  Fixture f("loader-mix", seed, make_docs(seed, counts, {2, 10, 30}, {6, 22, 50}, false), 3);
  const std::vector<double> p = {0.5, 0.3, 0.2};
  for (const bool length_weighted : {false, true}) {
    SCOPED_TRACE(length_weighted ? "length-weighted" : "plain");
    LoaderOptions o;
    o.seq_len = 64;
    o.packing = PackingMethod::None;
    o.source_weights = p;
    o.length_weighted = length_weighted;
    o.seed = seed;
    Loader loader(f.corpus, o);
    std::vector<double> expected = p;
    if (length_weighted) {  // ρ_i = p_i L̄_i / Σ_j p_j L̄_j, with the sources' mean document lengths
      double total = 0;
      for (int s = 0; s < 3; ++s) {
        double tokens = 0;
        for (const auto& d : f.docs) tokens += d.source == s ? double(d.tokens.size()) : 0;
        expected[size_t(s)] = p[size_t(s)] * tokens / counts[size_t(s)];
        total += expected[size_t(s)];
      }
      for (double& e : expected) e /= total;
    }
    for (int s = 0; s < 3; ++s) EXPECT_NEAR(loader.source_probabilities()[size_t(s)], expected[size_t(s)], 1e-12);
    const int64_t N = 30000;
    std::vector<int64_t> rows(3);
    std::map<size_t, int64_t> per_doc;
    for (const Batch& b : run(loader, N / 10, 10))
      for (int64_t r = 0; r < b.rows; ++r) {
        const int32_t id = b.ids[size_t(r * b.seq)];
        ++rows[size_t(id / kSourceStride)];
        ++per_doc[f.where.at(id).first];
      }
    for (int s = 0; s < 3; ++s) {
      const double q = expected[size_t(s)], sigma = std::sqrt(q * (1 - q) / double(N));
      EXPECT_NEAR(double(rows[size_t(s)]) / double(N), q, 5 * sigma) << "source " << s;
    }
    // Within a source, documents come in full passes: draw counts differ by at most one.
    for (int s = 0; s < 3; ++s) {
      int64_t lo = INT64_MAX, hi = 0;
      for (size_t d = 0; d < f.docs.size(); ++d)
        if (f.docs[d].source == s) lo = std::min(lo, per_doc[d]), hi = std::max(hi, per_doc[d]);
      EXPECT_LE(hi - lo, 1) << "source " << s;
    }
  }
}

TEST(Loader, SequenceParallelPartsTileEachRow) {
  EXPECT_EQ(sequence_part(16, 4, 0, SequenceLayout::ZigZag),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {14, 16}}));
  EXPECT_EQ(sequence_part(16, 4, 2, SequenceLayout::ZigZag),
            (std::vector<std::pair<int64_t, int64_t>>{{4, 6}, {10, 12}}));
  EXPECT_EQ(sequence_part(16, 4, 3, SequenceLayout::Contiguous), (std::vector<std::pair<int64_t, int64_t>>{{12, 16}}));
  test::expect_error([] { sequence_part(12, 4, 0, SequenceLayout::ZigZag); }, {"does not split into 8"});

  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Fixture f("loader-sp", seed, make_docs(seed, {60}, {1}, {50}, true), 1);
  LoaderOptions o;
  o.seq_len = 48;
  o.seed = seed;
  o.reset_at_document_starts = true;
  Loader whole_loader(f.corpus, o);
  const std::vector<Batch> whole = run(whole_loader, 3, 2);
  for (const SequenceLayout layout : {SequenceLayout::Contiguous, SequenceLayout::ZigZag}) {
    for (const int64_t P : {2, 3, 4}) {
      if (48 % (layout == SequenceLayout::ZigZag ? 2 * P : P)) continue;
      std::vector<std::vector<Batch>> parts;
      for (int64_t r = 0; r < P; ++r) {
        LoaderOptions po = o;
        po.sp_size = P;
        po.sp_rank = r;
        po.sp_layout = layout;
        Loader loader(f.corpus, po);
        parts.push_back(run(loader, 3, 2));
      }
      for (size_t step = 0; step < whole.size(); ++step) {
        const Batch& w = whole[step];
        for (int64_t row = 0; row < w.rows; ++row) {
          std::vector<int> covered(48);
          for (int64_t r = 0; r < P; ++r) {
            const Batch& b = parts[size_t(r)][step];
            ASSERT_EQ(b.seq, 48 / P);
            int64_t k = row * b.seq;
            for (const auto& [begin, end] : sequence_part(48, P, r, layout)) {
              for (int64_t t = begin; t < end; ++t, ++k) {
                ++covered[size_t(t)];
                const size_t i = size_t(row * 48 + t);
                EXPECT_EQ(b.ids[size_t(k)], w.ids[i]);
                EXPECT_EQ(b.targets[size_t(k)], w.targets[i]);      // pre-shifted targets travel with their token
                EXPECT_EQ(b.positions[size_t(k)], w.positions[i]);  // global positions
                EXPECT_EQ(b.segments[size_t(k)], w.segments[i]);
              }
            }
            if (layout == SequenceLayout::ZigZag) {  // rank r holds chunks r and 2P−1−r of 2P
              const int64_t c = 48 / (2 * P);
              EXPECT_EQ(b.ids[size_t(row * b.seq)], w.ids[size_t(row * 48 + r * c)]);
              EXPECT_EQ(b.ids[size_t(row * b.seq + c)], w.ids[size_t(row * 48 + (2 * P - 1 - r) * c)]);
            }
          }
          for (int c : covered) EXPECT_EQ(c, 1);
        }
      }
    }
  }
}

TEST(Loader, ResumeFromACursorReproducesTheStream) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Small epochs (a few batches each) so that runs cross several epoch boundaries.
  Fixture f("loader-resume", seed, make_docs(seed, {12, 9}, {3, 10}, {20, 40}, true), 2);
  for (const PackingMethod method : {PackingMethod::Concat, PackingMethod::Greedy, PackingMethod::Random}) {
    for (const bool weighted : {false, true}) {
      SCOPED_TRACE(fmt::format("{} weighted {}", packing_method_name(method), weighted));
      LoaderOptions o;
      o.seq_len = 24;
      o.packing = method;
      o.seed = seed;
      o.heldout_fraction = 0.1;
      if (weighted) o.source_weights = {0.3, 0.7}, o.length_weighted = true;
      const int64_t N = 25, rows = 3;
      Loader straight(f.corpus, o);
      const std::vector<Batch> expected = run(straight, N, rows);
      EXPECT_GE(straight.cursor().epoch, 2);
      for (const int64_t k : {int64_t(1), int64_t(11), N - 1}) {
        Loader first(f.corpus, o);
        run(first, k, rows);
        const LoaderCursor saved = LoaderCursor::parse(first.cursor().to_json(), "cursor");
        EXPECT_EQ(saved, first.cursor());
        Loader resumed(f.corpus, o);
        resumed.restore(saved);
        const std::vector<Batch> rest = run(resumed, N - k, rows);
        for (int64_t i = 0; i < N - k; ++i)
          expect_same(rest[size_t(i)], expected[size_t(k + i)], fmt::format("k {} step {}", k, k + i));
      }
    }
  }
}

TEST(Loader, ResumeOnTwoDataParallelRanksContinuesTheSingleRankStream) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Fixture f("loader-dp", seed, make_docs(seed, {15, 10}, {3, 10}, {20, 40}, true), 2);
  LoaderOptions o;
  o.seq_len = 16;
  o.packing = PackingMethod::BestFit;
  o.seed = seed;
  o.source_weights = {1, 2};
  const int64_t N = 20, k = 7, global_rows = 4;
  Loader single(f.corpus, o);
  const std::vector<Batch> expected = run(single, N, global_rows);

  Loader before(f.corpus, o);
  run(before, k, global_rows);
  const std::string saved = before.cursor().to_json();
  std::vector<std::vector<Batch>> ranks;
  for (int64_t r = 0; r < 2; ++r) {
    LoaderOptions ro = o;
    ro.dp_size = 2;
    ro.dp_rank = r;
    Loader loader(f.corpus, ro);
    loader.restore(LoaderCursor::parse(saved, "cursor"));
    ranks.push_back(run(loader, N - k, global_rows / 2));
  }
  for (int64_t i = 0; i < N - k; ++i) {
    Batch joined = ranks[0][size_t(i)];  // rank 0 holds the global batch's first rows, rank 1 the rest
    const Batch& second = ranks[1][size_t(i)];
    joined.rows += second.rows;
    joined.ids.insert(joined.ids.end(), second.ids.begin(), second.ids.end());
    joined.targets.insert(joined.targets.end(), second.targets.begin(), second.targets.end());
    joined.positions.insert(joined.positions.end(), second.positions.begin(), second.positions.end());
    joined.segments.insert(joined.segments.end(), second.segments.begin(), second.segments.end());
    expect_same(joined, expected[size_t(k + i)], fmt::format("step {}", k + i));
  }
}

TEST(Loader, CursorOfOtherDataOrOptionsIsRefused) {
  const uint64_t seed = test::fresh_seed();
  Fixture f("loader-fingerprint", seed, make_docs(seed, {20}, {1}, {30}, false), 1);
  LoaderOptions o;
  o.seq_len = 16;
  o.seed = seed;
  Loader a(f.corpus, o);
  run(a, 3, 2);
  o.seed = seed + 1;
  Loader b(f.corpus, o);
  test::expect_error([&] { b.restore(a.cursor()); }, {"fingerprint", "seed"});
  test::expect_error([] { LoaderCursor::parse(R"({"sample": 1})", "ckpt/data_cursor"); },
                     {"ckpt/data_cursor", "epoch"});
}

TEST(Loader, HeldOutDocumentsStayOutOfTraining) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Fixture f("loader-heldout", seed, make_docs(seed, {400}, {5}, {30}, false), 1);
  LoaderOptions o;
  o.seq_len = 32;
  o.seed = seed;
  o.heldout_fraction = 0.2;
  Loader loader(f.corpus, o);
  // Each document is held out with probability 0.2: ±5σ of Binomial(400, 0.2) is ±40.
  EXPECT_NEAR(double(loader.heldout_documents()), 80.0, 40.0);
  EXPECT_EQ(loader.heldout_documents() + loader.train_documents(), 400);
  std::set<size_t> heldout;
  for (int64_t i = 0; i < loader.heldout_batches(2); ++i) {
    Batch b;
    loader.heldout_batch(i, 2, b);
    for (int32_t id : b.ids) heldout.insert(f.where.at(id).first);
  }
  EXPECT_FALSE(heldout.empty());
  for (const Batch& b : one_epoch(loader))
    for (int32_t id : b.ids) EXPECT_FALSE(heldout.count(f.where.at(id).first)) << "document " << f.where.at(id).first;
}

}  // namespace
}  // namespace primer::data
