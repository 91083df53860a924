// Token shards and tokenized-data directories: round trip, atomic writing (an interrupted writer leaves no
// shard and no manifest), and corrupted or inconsistent files detected with errors naming file and dataset.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/io/durable_file.h"
#include "core/io/hdf5_file.h"
#include "data/token_corpus.h"
#include "data/token_shards.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"
#include "tests/support/token_data.h"

namespace primer {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;
using test::SyntheticDoc;

// Documents of 1..max_len random tokens, random masks (some all-ones), sources in [0, sources).
std::vector<SyntheticDoc> random_docs(uint64_t seed, int count, int max_len, int sources, int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<SyntheticDoc> docs(static_cast<size_t>(count));
  for (SyntheticDoc& d : docs) {
    d.tokens.resize(size_t(1 + rng() % uint64_t(max_len)));
    for (int32_t& t : d.tokens) t = int32_t(rng() % uint64_t(vocab));
    if (rng() % 2) {
      d.mask.resize(d.tokens.size());
      for (uint8_t& m : d.mask) m = uint8_t(rng() % 2);
    }
    d.source = int32_t(rng() % uint64_t(sources));
  }
  return docs;
}

void expect_same_documents(const data::TokenCorpus& corpus, const std::vector<SyntheticDoc>& docs) {
  ASSERT_EQ(corpus.documents(), int64_t(docs.size()));
  for (size_t i = 0; i < docs.size(); ++i) {
    const data::DocumentView view = corpus.document(int64_t(i));
    ASSERT_EQ(std::vector<int32_t>(view.tokens.begin(), view.tokens.end()), docs[i].tokens) << "document " << i;
    const std::vector<uint8_t> mask =
        docs[i].mask.empty() ? std::vector<uint8_t>(docs[i].tokens.size(), 1) : docs[i].mask;
    ASSERT_EQ(std::vector<uint8_t>(view.loss_mask.begin(), view.loss_mask.end()), mask) << "document " << i;
    ASSERT_EQ(view.source, docs[i].source) << "document " << i;
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Names in `dir` that start with '.' (staging directories and temporaries).
std::vector<std::string> hidden_entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string()[0] == '.') names.push_back(e.path().filename().string());
  return names;
}

TEST(TokenShards, RoundTripAcrossShardsAndSources) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("shards-roundtrip", seed);
  const auto docs = random_docs(seed, 300, 90, 3, 151936);
  const data::TokenManifest written = test::write_token_data(dir / "out", docs, 3, 2000);
  EXPECT_GT(written.shards.size(), 5u);  // ~13.5k tokens in shards of >= 2000

  const data::TokenManifest read = data::TokenManifest::read(dir / "out");
  EXPECT_EQ(read.to_json(), written.to_json());
  int64_t tokens = 0;
  for (const auto& d : docs) tokens += int64_t(d.tokens.size());
  EXPECT_EQ(read.tokens(), tokens);
  EXPECT_EQ(read.documents(), 300);
  for (int s = 0; s < 3; ++s) {
    int64_t n = 0;
    for (const auto& d : docs) n += d.source == s;
    EXPECT_EQ(read.sources[size_t(s)].documents, n);
  }
  expect_same_documents(data::TokenCorpus::open({dir / "out"}, true), docs);
  expect_same_documents(data::TokenCorpus::open({dir / "out"}, false), docs);

  // The datasets are served straight from the memory map: contiguous, aligned, no copy.
  const data::TokenShard shard =
      data::TokenShard::open(dir / "out/shard-00000.h5", read.shards[0], read.tokenizer, 3, true);
  EXPECT_TRUE(shard.memory_mapped());
  EXPECT_TRUE(hidden_entries(dir.path).empty());
}

TEST(TokenShards, ShardsAreByteIdenticalForTheSameDocuments) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("shards-deterministic", seed);
  const auto docs = random_docs(seed, 50, 40, 2, 1000);
  const auto a = test::write_token_data(dir / "a", docs, 2, 500);
  const auto b = test::write_token_data(dir / "b", docs, 2, 500);
  EXPECT_EQ(a.to_json(), b.to_json());  // CRC32Cs included: no timestamps or other run-dependent bytes
}

TEST(TokenShards, AnInterruptedShardWriterLeavesNoFile) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("shards-interrupted", seed);
  {
    data::TokenShardWriter writer(dir / "never.h5", test::synthetic_tokenizer());
    writer.add(std::vector<int32_t>{1, 2, 3}, {}, 0);
  }  // destroyed without commit
  // A commit that fails after the data is written: the final name is taken by a non-empty directory.
  fs::create_directories(dir.path / "taken.h5" / "inside");
  data::TokenShardWriter writer(dir / "taken.h5", test::synthetic_tokenizer());
  writer.add(std::vector<int32_t>{4, 5}, {}, 0);
  const std::string message = error_of([&] { writer.commit(); });
  EXPECT_NE(message.find("cannot rename"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir.path / "never.h5"));
  EXPECT_TRUE(fs::is_directory(dir.path / "taken.h5" / "inside"));
  EXPECT_TRUE(hidden_entries(dir.path).empty());
}

TEST(TokenShards, AnInterruptedDatasetWriterLeavesTheOldOutputAndNoShard) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("dataset-interrupted", seed);
  const auto old_docs = random_docs(seed, 20, 30, 1, 1000);
  const auto old_manifest = test::write_token_data(dir / "out", old_docs, 1, 100);
  const auto docs = random_docs(seed + 1, 200, 30, 1, 1000);
  const std::string message = error_of([&] {
    data::TokenDatasetWriter writer(dir / "out", test::synthetic_tokenizer(), {{"s0", "text", 1}}, 100);
    for (size_t i = 0; i < docs.size(); ++i) {
      if (i == 150) PRIMER_FAIL("simulated crash after {} documents", i);  // several shards are committed by now
      writer.add(docs[i].tokens, docs[i].mask, 0);
    }
    writer.finish();
  });
  EXPECT_NE(message.find("simulated crash"), std::string::npos) << message;
  EXPECT_TRUE(hidden_entries(dir.path).empty());  // the staging directory and its shards are gone
  EXPECT_EQ(data::TokenManifest::read(dir / "out").to_json(), old_manifest.to_json());
  expect_same_documents(data::TokenCorpus::open({dir / "out"}, true), old_docs);

  // A finished writer replaces the old output entirely (no stale shard survives).
  test::write_token_data(dir / "out", std::vector<SyntheticDoc>(docs.begin(), docs.begin() + 3), 1, 1 << 20);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path / "out"), fs::directory_iterator()),
            2);  // manifest + 1 shard
  EXPECT_TRUE(hidden_entries(dir.path).empty());
}

TEST(TokenShards, RefusesToReplaceADirectoryThatIsNotTokenizedData) {
  ScratchDir dir("dataset-refuse", test::fresh_seed());
  std::ofstream(dir / "precious.txt") << "keep me";
  test::expect_error(
      [&] {
        data::TokenDatasetWriter(dir.path.string(), test::synthetic_tokenizer(), {{"s0", "text", 1}}, 10);
      },
      {"exists and is not tokenized data", "refusing"});
  EXPECT_TRUE(fs::exists(dir / "precious.txt"));
}

TEST(TokenShards, CorruptionAndTruncationAreDetected) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("shards-corrupt", seed);
  const auto docs = random_docs(seed, 100, 50, 1, 1000);
  test::write_token_data(dir / "out", docs, 1, 1 << 20);
  const std::string shard = dir / "out/shard-00000.h5";
  std::string bytes;
  {
    std::ifstream in(shard, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // Flip one bit of the token data (found by its bytes) and keep the size.
  const std::string needle(reinterpret_cast<const char*>(docs[0].tokens.data()), docs[0].tokens.size() * 4);
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  std::string corrupted = bytes;
  corrupted[at + seed % needle.size()] ^= char(1 << (seed % 8));
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << corrupted;
  test::expect_error([&] { data::TokenCorpus::open({dir / "out"}, true); },
                     {"shard-00000.h5", "is corrupted", "CRC32C"});

  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 100);
  test::expect_error(
      [&] { data::TokenCorpus::open({dir / "out"}, false); },
      {"shard-00000.h5", fmt::format("has {} bytes, the manifest records {}", bytes.size() - 100, bytes.size())});

  fs::remove(shard);
  test::expect_error([&] { data::TokenCorpus::open({dir / "out"}, false); }, {"shard-00000.h5", "cannot be read"});
  test::expect_error([&] { data::TokenCorpus::open({dir / "nothing"}, false); },
                     {"no manifest.json", "primer tokenize"});
}

// A shard written by hand (as another tool might), described by a manifest entry with its true size and CRC.
struct HandWritten {
  data::ShardInfo info;
  std::string path;
};
HandWritten write_by_hand(const std::string& path, const std::vector<int32_t>& tokens,
                          const std::vector<int64_t>& offsets, const std::vector<int32_t>& sources,
                          io::Hdf5Layout layout) {
  const data::TokenizerIdentity tok = test::synthetic_tokenizer(1000);
  const std::vector<uint8_t> mask(tokens.size(), 1);
  {
    io::Hdf5File h5 = io::Hdf5File::create(path);
    h5.write("/tokens", {int64_t(tokens.size())}, tokens.data(), layout);
    h5.write("/doc_offsets", {int64_t(offsets.size())}, offsets.data(), layout);
    h5.write("/loss_mask", {int64_t(mask.size())}, mask.data(), layout);
    h5.write("/source_ids", {int64_t(sources.size())}, sources.data(), layout);
    h5.set_string_attribute("/", "format", "primer-token-shard");
    for (const auto& [name, value] : {std::pair<const char*, int64_t>{"format_version", data::kTokenDataFormatVersion},
                                      {"documents", int64_t(sources.size())},
                                      {"tokens", int64_t(tokens.size())},
                                      {"tokenizer_crc32c", tok.crc32c},
                                      {"vocab_size", tok.vocab_size},
                                      {"eos_id", tok.eos_id}})
      h5.set_attribute<int64_t>("/", name, value);
    h5.close();
  }
  const io::FileDigest d = io::digest(path);
  return {{"hand.h5", int64_t(sources.size()), int64_t(tokens.size()), d.bytes, d.crc32c}, path};
}

TEST(TokenShards, OtherLayoutsAreReadByCopyAndBadContentsAreNamed) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("shards-by-hand", seed);
  const data::TokenizerIdentity tok = test::synthetic_tokenizer(1000);
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10};
  // Chunked, compressed shards (e.g. from h5py) are valid: read into memory instead of mapped.
  for (const auto layout : {io::Hdf5Layout::Checked, io::Hdf5Layout::Compressed}) {
    const auto h = write_by_hand(dir / "hand.h5", tokens, {0, 2, 6}, {0, 0}, layout);
    const auto shard = data::TokenShard::open(h.path, h.info, tok, 1, true);
    EXPECT_FALSE(shard.memory_mapped());
    ASSERT_EQ(shard.documents(), 2);
    EXPECT_EQ(std::vector<int32_t>(shard.document(1).tokens.begin(), shard.document(1).tokens.end()),
              (std::vector<int32_t>{7, 8, 9, 10}));
  }
  const auto contiguous = io::Hdf5Layout::Contiguous;
  auto h = write_by_hand(dir / "hand.h5", tokens, {0, 4, 3}, {0, 0}, contiguous);
  test::expect_error([&] { data::TokenShard::open(h.path, h.info, tok, 1, false); },
                     {"hand.h5", "'/doc_offsets'", "runs from 0 to 3"});
  h = write_by_hand(dir / "hand.h5", tokens, {0, 4, 4, 6}, {0, 0, 0}, contiguous);
  test::expect_error([&] { data::TokenShard::open(h.path, h.info, tok, 1, false); },
                     {"hand.h5", "'/doc_offsets' is not increasing at document 1"});
  h = write_by_hand(dir / "hand.h5", tokens, {0, 2, 6}, {0, 3}, contiguous);
  test::expect_error([&] { data::TokenShard::open(h.path, h.info, tok, 2, false); },
                     {"hand.h5", "'/source_ids' holds 3 for document 1"});
  h = write_by_hand(dir / "hand.h5", {5, 6, 1000}, {0, 3}, {0}, contiguous);
  test::expect_error([&] { data::TokenShard::open(h.path, h.info, tok, 1, true); },
                     {"hand.h5", "'/tokens' holds id 1000 at 2, outside the vocabulary of 1000"});
  data::ShardInfo wrong = h.info;
  wrong.tokens = 4;
  test::expect_error([&] { data::TokenShard::open(h.path, wrong, tok, 1, false); },
                     {"hand.h5", "attribute 'tokens' is 3, the manifest says 4"});
}

TEST(TokenShards, DirectoriesFromDifferentTokenizersDoNotMix) {
  ScratchDir dir("shards-tokenizers", test::fresh_seed());
  const std::vector<SyntheticDoc> docs = {{{1, 2, 3}, {}, 0}};
  test::write_token_data(dir / "a", docs, 1, 100, test::synthetic_tokenizer(500));
  test::write_token_data(dir / "b", docs, 1, 100, test::synthetic_tokenizer(600));
  test::expect_error([&] { data::TokenCorpus::open({dir / "a", dir / "b"}, false); }, {"cannot be mixed"});
  test::write_token_data(dir / "c", {{{4, 5}, {}, 0}, {{6}, {}, 1}}, 2, 100, test::synthetic_tokenizer(500));
  const auto corpus = data::TokenCorpus::open({dir / "a", dir / "c"}, true);
  ASSERT_EQ(corpus.sources(), 3);  // a's s0, then c's s0 and s1
  EXPECT_EQ(corpus.document(2).source, 2);
  EXPECT_EQ(corpus.document(2).tokens[0], 6);
}

}  // namespace
}  // namespace primer
