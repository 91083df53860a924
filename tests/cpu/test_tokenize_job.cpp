// `primer tokenize`: text, JSONL and chat sources through a stand-in tokenizer into shards, the same output
// whatever the number of threads, malformed records reported with file:line (skipped or fatal), config errors
// that point at the key, and an interrupted job that leaves the previous output untouched.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "core/io/crc32c.h"
#include "data/chat_format.h"
#include "data/text_inputs.h"
#include "data/token_corpus.h"
#include "data/tokenize_job.h"
#include "data/tokenizer_encoder.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_tokenizer.h"

namespace primer::data {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;

constexpr int32_t kEos = 299, kRoleMarker = 256, kTurnEnd = 298;

// Bytes as ids; a chat turn is [256 + is_assistant, content bytes..., 298], loss on assistant turns.
class FakeEncoder : public TextEncoder {
 public:
  explicit FakeEncoder(int64_t crash_after = -1) : crash_after_(crash_after) {}
  std::vector<int32_t> encode(std::string_view text) const override {
    if (crash_after_ >= 0 && calls_++ >= crash_after_) PRIMER_FAIL("simulated crash inside the tokenizer");
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  void encode_chat(const json::Value& messages, std::vector<int32_t>& ids, std::vector<uint8_t>& mask) const override {
    for (const json::Value& m : messages.as_array()) {
      const json::Value* role = m.is_object() ? m.as_object().find("role") : nullptr;
      const json::Value* content = m.is_object() ? m.as_object().find("content") : nullptr;
      PRIMER_CHECK(role && role->is_string() && content && content->is_string(),
                   "a message needs string \"role\" and \"content\"");
      const bool assistant = role->as_string() == "assistant";
      std::vector<int32_t> turn = {kRoleMarker + assistant};
      for (unsigned char c : content->as_string()) turn.push_back(c);
      turn.push_back(kTurnEnd);
      ids.insert(ids.end(), turn.begin(), turn.end());
      mask.push_back(0);
      mask.insert(mask.end(), turn.size() - 1, uint8_t(assistant));
    }
  }
  std::optional<int32_t> token_id(std::string_view token) const override {
    return token == "<eod>" ? std::optional<int32_t>(297) : std::nullopt;
  }
  TokenizerIdentity identity() const override { return {"fake", 0xfa6eu, 300, kEos}; }

 private:
  int64_t crash_after_;
  mutable std::atomic<int64_t> calls_{0};
};

std::string read_all(std::FILE* f) {
  std::rewind(f);
  std::string text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) text.append(buffer, n);
  return text;
}

// Inputs: 12 text files (one blank), a JSONL file with 40 records and 4 malformed lines, a chat file with 6
// conversations and 1 malformed one.
struct Inputs {
  ScratchDir dir;
  std::vector<std::string> texts;        // the non-empty text files' contents, in path order
  std::vector<std::string> jsonl;        // the good records' texts, in order
  std::map<int, std::string> malformed;  // data.jsonl line → expected fragment of the report
  Inputs(const std::string& name, uint64_t seed) : dir(name, seed) {
    std::mt19937_64 rng(seed);
    auto random_text = [&](size_t n) {
      std::string s;
      for (size_t i = 0; i < n; ++i) s += char('a' + rng() % 26);
      return s;
    };
    fs::create_directories(dir.path / "texts" / "sub");
    for (int i = 0; i < 12; ++i) {
      const std::string path = dir / fmt::format("texts/{}/{:02d}.txt", i % 2 ? "sub" : ".", i);
      const std::string text = i == 5 ? "  \n\n" : random_text(1 + rng() % 300);
      std::ofstream(path) << text;
    }
    for (const std::string& p : expand_inputs({dir / "texts"}, "test")) {
      std::ifstream in(p);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (text.find_first_not_of(" \n") != std::string::npos) texts.push_back(text);
    }
    std::ofstream out(dir / "data.jsonl");
    malformed = {{4, "data.jsonl:4:10: expected"},
                 {9, "data.jsonl:9: no \"text\" field"},
                 {17, "data.jsonl:17: \"text\" is integer, expected a string"},
                 {30, "data.jsonl:30: expected a JSON object, got array"}};
    for (int line = 1, good = 0; good < 40 || line <= 30; ++line) {
      if (line == 4)
        out << "{\"text\": oops}\n";
      else if (line == 9)
        out << "{\"body\": \"x\"}\n";
      else if (line == 17)
        out << "{\"text\": 17}\n";
      else if (line == 30)
        out << "[1, 2]\n";
      else if (line == 12)
        out << "\n";  // blank lines are not records
      else {
        jsonl.push_back(random_text(1 + rng() % 80) + " \"quoted\" ünïcode");
        json::Value record;
        record["text"] = jsonl.back();
        out << json::dump(record) << "\n";
        ++good;
      }
    }
    std::ofstream chat(dir / "chat.jsonl");
    for (int i = 0; i < 7; ++i) {
      if (i == 3)
        chat << R"({"messages": [{"role": "user"}]})"
             << "\n";
      else
        chat << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello )" << i
             << R"("}]})"
             << "\n";
    }
  }

  std::string job(const std::string& output, const std::string& extra, const std::string& sources = "") const {
    const std::string path = dir / "job.yaml";
    std::ofstream(path) << "tokenizer: fake\noutput_dir: " << output << "\n"
                        << extra << "\nsources:\n"
                        << (sources.empty() ? fmt::format("  docs: {{files: [{}], format: text}}\n"
                                                          "  records: {{files: ['{}'], format: jsonl}}\n"
                                                          "  conversations: {{files: [{}], format: chat}}\n",
                                                          dir / "texts", dir / "dat?.jsonl", dir / "chat.jsonl")
                                            : sources);
    return path;
  }
};

TEST(TokenizeJob, TextJsonlAndChatIntoShardsIndependentOfThreads) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Inputs in("tokenize-job", seed);
  const FakeEncoder encoder;
  std::string manifests[2];
  for (const int workers : {1, 3}) {
    const std::string out = in.dir / fmt::format("out{}", workers);
    // chunk_bytes 200: data.jsonl is cut into many pieces, so line numbers must carry across pieces.
    const auto job = config::load_config(
        in.job(out, fmt::format("workers: {}\non_error: skip\nchunk_bytes: 200\nshard_tokens: 1000", workers)),
        tokenize_schema());
    std::FILE* log = std::tmpfile();
    const TokenizeSummary summary = run_tokenize_job(job, encoder, log);
    const std::string report = read_all(log);
    std::fclose(log);
    EXPECT_EQ(summary.skipped, 6);  // the blank text file, 4 JSONL lines, 1 conversation
    EXPECT_NE(report.find("texts/sub/05.txt: empty text"), std::string::npos) << report;
    for (const auto& [line, fragment] : in.malformed)
      EXPECT_NE(report.find(fragment), std::string::npos) << fragment << "\n" << report;
    EXPECT_NE(report.find("chat.jsonl:4: a message needs"), std::string::npos) << report;
    EXPECT_EQ(summary.documents, int64_t(in.texts.size() + in.jsonl.size() + 6));
    EXPECT_GT(summary.shards, 3);

    const TokenManifest m = TokenManifest::read(out);
    manifests[workers == 1 ? 0 : 1] = m.to_json();
    ASSERT_EQ(m.sources.size(), 3u);
    EXPECT_EQ(m.sources[0].skipped, 1);
    EXPECT_EQ(m.sources[1].skipped, 4);
    EXPECT_EQ(m.sources[0].files, 12);
    EXPECT_EQ(m.sources[2].skipped, 1);

    const TokenCorpus corpus = TokenCorpus::open({out}, true);
    int64_t d = 0;
    auto expect_text = [&](const std::string& text, int32_t source) {
      const DocumentView v = corpus.document(d++);
      std::vector<int32_t> ids;
      for (unsigned char c : text) ids.push_back(c);
      ids.push_back(kEos);
      EXPECT_EQ(std::vector<int32_t>(v.tokens.begin(), v.tokens.end()), ids);
      EXPECT_EQ(v.source, source);
      EXPECT_TRUE(std::all_of(v.loss_mask.begin(), v.loss_mask.end(), [](uint8_t m) { return m == 1; }));
    };
    for (const std::string& text : in.texts) expect_text(text, 0);
    for (const std::string& text : in.jsonl) expect_text(text, 1);
    for (int i = 0; i < 6; ++i) {
      const DocumentView v = corpus.document(d++);
      EXPECT_EQ(v.source, 2);
      const std::string reply = fmt::format("hello {}", i < 3 ? i : i + 1);
      ASSERT_EQ(int64_t(v.tokens.size()), 4 + 2 + int64_t(reply.size()));  // [256 h i 298] [257 reply 298]
      EXPECT_EQ(v.tokens[0], kRoleMarker);
      EXPECT_EQ(v.tokens[4], kRoleMarker + 1);
      for (size_t t = 0; t < v.tokens.size(); ++t) EXPECT_EQ(v.loss_mask[t], t > 4) << "token " << t;
    }
  }
  EXPECT_EQ(manifests[0], manifests[1]);  // byte-identical shards (same CRC32Cs) with 1 or 3 threads
}

// Text that is not UTF-8 (Latin-1 here) is tokenized byte for byte, as before, but counted and reported with the
// file and the first ill-formed byte (it went through silently).
TEST(TokenizeJob, InvalidUtf8IsCountedAndReported) {
  test::ScratchDir dir("tokenize-utf8", test::fresh_seed());
  std::filesystem::create_directories(dir / "texts");
  std::ofstream(dir / "texts/latin1.txt") << "caf\xe9 cr\xe8me\n";
  std::ofstream(dir / "texts/utf8.txt") << "caf\xc3\xa9\n";
  std::ofstream(dir / "job.yaml") << "tokenizer: fake\noutput_dir: " << (dir / "out") << "\nsources:\n  docs: {files: ["
                                  << (dir / "texts") << "], format: text}\n";
  std::FILE* log = std::tmpfile();
  const TokenizeSummary summary =
      run_tokenize_job(config::load_config(dir / "job.yaml", tokenize_schema()), FakeEncoder(), log);
  const std::string report = read_all(log);
  std::fclose(log);
  EXPECT_EQ(summary.documents, 2);
  EXPECT_EQ(summary.invalid_utf8, 1);
  EXPECT_NE(report.find("latin1.txt: not valid UTF-8 (the first ill-formed byte at offset 3, 0xe9); tokenized byte "
                        "for byte"),
            std::string::npos)
      << report;
  EXPECT_EQ(report.find("utf8.txt: not valid"), std::string::npos) << report;
}

TEST(TokenizeJob, MalformedRecordStopsTheJobWithFileAndLine) {
  const uint64_t seed = test::fresh_seed();
  Inputs in("tokenize-fail", seed);
  const std::string out = in.dir / "out";
  const auto job =
      config::load_config(in.job(out, "workers: 2\nchunk_bytes: 100",
                                 fmt::format("  records: {{files: [{}], format: jsonl}}\n", in.dir / "data.jsonl")),
                          tokenize_schema());
  test::expect_error([&] { run_tokenize_job(job, FakeEncoder(), nullptr); },
                     {"data.jsonl:4:10: expected", "on_error is fail"});
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(in.dir.path)) EXPECT_NE(e.path().filename().string()[0], '.') << e.path();
}

TEST(TokenizeJob, AnInterruptedJobLeavesThePreviousOutput) {
  const uint64_t seed = test::fresh_seed();
  Inputs in("tokenize-crash", seed);
  const std::string out = in.dir / "out";
  const auto job = config::load_config(in.job(out, "workers: 2\non_error: skip\nshard_tokens: 300"), tokenize_schema());
  run_tokenize_job(job, FakeEncoder(), nullptr);
  const std::string before = TokenManifest::read(out).to_json();
  test::expect_error([&] { run_tokenize_job(job, FakeEncoder(30), nullptr); }, {"simulated crash"});
  EXPECT_EQ(TokenManifest::read(out).to_json(), before);
  TokenCorpus::open({out}, true);  // every shard the manifest lists is still there and intact
  for (const auto& e : fs::directory_iterator(in.dir.path)) EXPECT_NE(e.path().filename().string()[0], '.') << e.path();
}

TEST(TokenizeJob, ConfigErrorsPointAtTheKey) {
  Inputs in("tokenize-config", test::fresh_seed());
  const std::string out = in.dir / "out";
  const FakeEncoder encoder;
  auto run_with = [&](const std::string& extra, const std::string& sources) {
    run_tokenize_job(config::load_config(in.job(out, extra, sources), tokenize_schema()), encoder, nullptr);
  };
  test::expect_error([&] { run_with("", fmt::format("  docs: {{files: [{}], fromat: text}}\n", in.dir / "texts")); },
                     {"job.yaml:", "sources.docs", "unknown key 'fromat'", "did you mean 'format'"});
  test::expect_error([&] { run_with("", "  docs: {format: text}\n"); },
                     {"sources.docs", "missing required key 'files'"});
  test::expect_error([&] { run_with("", fmt::format("  docs: {{files: ['{}'], format: text}}\n", in.dir / "*.md")); },
                     {"sources.docs", "*.md' matches no file"});
  test::expect_error(
      [&] { run_with("", fmt::format("  c: {{files: [{}], format: chat, eos_token: x}}\n", in.dir / "chat.jsonl")); },
      {"eos_token does not apply to chat sources"});
  test::expect_error(
      [&] { run_with("", fmt::format("  docs: {{files: [{}], format: text, eos_token: '<x>'}}\n", in.dir / "texts")); },
      {"eos_token '<x>' is not a token"});
  test::expect_error([&] { run_with("", "  docs: [a, b]\n"); }, {"sources.docs", "expected a mapping of source keys"});
  test::expect_error(
      [&] { run_with("worker: 2", fmt::format("  docs: {{files: [{}], format: text}}\n", in.dir / "texts")); },
      {"job.yaml:", "unknown key 'worker'", "did you mean 'workers'"});
  test::expect_error(
      [&] { run_with("on_error: ignore", fmt::format("  docs: {{files: [{}], format: text}}\n", in.dir / "texts")); },
      {"on_error", "one of fail, skip"});
}

// The job over a real byte-level BPE tokenizer (the hand-made one of the tokenizer tests): documents end in the
// configured eos_token, special-token text inside documents stays text, conversations go through Qwen3's chat
// format, and the manifest records the tokenizer.json's CRC32C.
TEST(TokenizeJob, RunsWithTheBpeTokenizerAndTheChatFormat) {
  test::tiny::ScratchDir tok_dir("job-encoder");
  const Tokenizer tokenizer = test::tiny::load(tok_dir);
  ScratchDir dir("tokenize-bpe", test::fresh_seed());
  const std::string text = "hello world <|im_end|> aab hello";
  std::ofstream(dir / "a.txt") << text;
  std::ofstream(dir / "chat.jsonl") << R"({"messages": [{"role": "user", "content": "hello"}, )"
                                    << R"({"role": "assistant", "content": "world", "reasoning_content": "aa"}]})"
                                    << "\n";
  std::ofstream(dir / "job.yaml") << "tokenizer: " << tok_dir.path.string() << "\noutput_dir: " << dir / "out"
                                  << "\nsources:\n  docs: {files: [" << dir / "a.txt"
                                  << "], format: text, eos_token: '<|endoftext|>'}\n  chat: {files: ["
                                  << dir / "chat.jsonl"
                                  << "], format: chat}\n";
  const TokenizerEncoder encoder(tok_dir.path.string());
  run_tokenize_job(config::load_config(dir / "job.yaml", tokenize_schema()), encoder, nullptr);

  const TokenCorpus corpus = TokenCorpus::open({dir / "out"}, true);
  ASSERT_EQ(corpus.documents(), 2);
  std::vector<int32_t> expected = tokenizer.encode(text, false);
  EXPECT_EQ(std::count(expected.begin(), expected.end(), test::tiny::kImEnd), 0);  // stays plain text
  expected.push_back(test::tiny::kEndOfText);
  const DocumentView doc = corpus.document(0);
  EXPECT_EQ(std::vector<int32_t>(doc.tokens.begin(), doc.tokens.end()), expected);

  const std::vector<ChatMessage> messages = {{"user", "hello", std::nullopt}, {"assistant", "world", "aa"}};
  const ChatTokens chat = tokenize_chat(tokenizer, messages);
  const DocumentView conversation = corpus.document(1);
  EXPECT_EQ(std::vector<int32_t>(conversation.tokens.begin(), conversation.tokens.end()), chat.ids);
  EXPECT_EQ(std::vector<uint8_t>(conversation.loss_mask.begin(), conversation.loss_mask.end()), chat.loss_mask);

  const TokenManifest m = TokenManifest::read(dir / "out");
  std::ifstream json_file(tok_dir.path / "tokenizer.json", std::ios::binary);
  const std::string definition((std::istreambuf_iterator<char>(json_file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(m.tokenizer.crc32c, io::crc32c_update(0, definition.data(), definition.size()));
  EXPECT_EQ(m.tokenizer.vocab_size, tokenizer.vocab_size());
  EXPECT_EQ(m.tokenizer.eos_id, test::tiny::kImEnd);
}

// The pool really overlaps work: an encoder that sleeps 100 ms per document (needing no CPU, so a busy machine
// does not matter) takes >= 800 ms for 8 files on one worker and, ideally, 200 ms on four; 600 ms leaves room
// for scheduling delays while still failing a pool that runs one task at a time.
TEST(TokenizeJob, WorkersRunConcurrently) {
  class SlowEncoder : public FakeEncoder {
   public:
    std::vector<int32_t> encode(std::string_view text) const override {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return FakeEncoder::encode(text);
    }
  };
  ScratchDir dir("tokenize-concurrent", test::fresh_seed());
  for (int i = 0; i < 8; ++i) std::ofstream(dir / fmt::format("{}.txt", i)) << "text " << i;
  double seconds[2];
  for (const int workers : {1, 4}) {
    std::ofstream(dir / "job.yaml") << "tokenizer: fake\noutput_dir: " << dir / "out"
                                    << "\nworkers: " << workers << "\nsources:\n  docs: {files: ['" << dir / "*.txt"
                                    << "'], format: text}\n";
    const auto summary =
        run_tokenize_job(config::load_config(dir / "job.yaml", tokenize_schema()), SlowEncoder(), nullptr);
    EXPECT_EQ(summary.documents, 8);
    seconds[workers == 1 ? 0 : 1] = summary.seconds;
  }
  EXPECT_GE(seconds[0], 0.8);
  EXPECT_LT(seconds[1], 0.6) << "4 workers took " << seconds[1] << " s, 1 worker " << seconds[0] << " s";
}

// docs/data.md's tables of the job and source keys are hand-written: every key must appear in them.
TEST(TokenizeJob, EveryKeyIsDocumented) {
  std::ifstream in(PRIMER_SOURCE_DIR "/docs/data.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(doc.empty());
  for (const auto* schema : {&tokenize_schema(), &tokenize_source_schema()})
    for (const config::Field& f : schema->fields())
      EXPECT_NE(doc.find("| `" + f.key + "` |"), std::string::npos) << f.key << " is missing from docs/data.md";
}

TEST(TextInputs, LineAlignedChunksCoverTheText) {
  using Chunks = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(line_aligned_chunks("a\nbb\nccc\n", 2), (Chunks{{0, 2}, {2, 5}, {5, 9}}));
  EXPECT_EQ(line_aligned_chunks("a\nbb\nccc", 4), (Chunks{{0, 5}, {5, 8}}));
  EXPECT_EQ(line_aligned_chunks("abc", 100), (Chunks{{0, 3}}));
  EXPECT_TRUE(line_aligned_chunks("", 10).empty());
}

}  // namespace
}  // namespace primer::data
