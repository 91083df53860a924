// The byte-level BPE tokenizer. Always: a small hand-made tokenizer.json whose merges give ids we can work out by
// hand (merge order by rank, leftmost ties, added tokens with longest match, allow_special, invalid UTF-8, empty
// input, 1 MB lines, NFC, the Llama-3 variants, load errors), the pre-tokenizer's pieces against the regex, UTF-8
// and NFC edge cases, and the two merge algorithms against each other. With the fetched Qwen3/Llama-3 tokenizers
// (tools/fetch-qwen3-tokenizer.sh): ids, decoding and NFC id for id against the JavaScript reference on a real
// corpus (the license texts, a multilingual sample, the kernel documentation when fetched).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/io/json.h"
#include "data/bpe.h"
#include "data/pretokenizer.h"
#include "data/tokenizer.h"
#include "data/unicode.h"
#include "data/unicode_tables.h"
#include "tests/support/js_reference.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_tokenizer.h"

namespace primer {
namespace {

namespace fs = std::filesystem;
using data::Tokenizer;
using namespace test::tiny;
using Ids = std::vector<int32_t>;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Ids byte_ids(std::string_view s) {
  Ids ids;
  for (const char c : s) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}
Ids concat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(TokenizerTiny, MergesLowestRankFirstLeftmostOnTies) {
  ScratchDir dir("merges");
  const Tokenizer tok = load(dir);
  EXPECT_EQ(tok.encode("hello world"), (Ids{kHello, kSpaceWorld}));
  // "world" has no Ġ: o+r (rank 5) then l+d (rank 7); "Ġw"+"or" never applies.
  EXPECT_EQ(tok.encode("world"), (Ids{'w', kOr, kLd}));
  EXPECT_EQ(tok.encode("aaa"), (Ids{kAa, 'a'}));  // a+a at 0 and 1 tie: the leftmost wins
  EXPECT_EQ(tok.encode("aaaa"), (Ids{kAa, kAa}));
  EXPECT_EQ(tok.encode("abc"), (Ids{'a', kBc}));       // b+c (rank 10) before a+b (rank 11)
  EXPECT_EQ(tok.encode("xyz"), (Ids{'x', 'y', 'z'}));  // a token no merge reaches stays split
  EXPECT_EQ(tok.encode("hello\n\nhello"), (Ids{kHello, '\n', '\n', kHello}));
  EXPECT_EQ(tok.vocab_size(), kThinkEnd + 1);
  EXPECT_EQ(tok.token_id("Ġworld"), kSpaceWorld);
  EXPECT_EQ(tok.token_id("<think>"), kThink);
  EXPECT_EQ(tok.token_id("nope"), std::nullopt);
  EXPECT_EQ(tok.eos_id(), kImEnd);
  EXPECT_EQ(tok.bos_id(), std::nullopt);
  EXPECT_EQ(tok.decode(Ids{kHello, kSpaceWorld, kImEnd}), "hello world<|im_end|>");
  test::expect_error([&] { tok.decode(Ids{280}); }, {"id 280", "tokenizer.json"});  // a gap in the id range
  test::expect_error([&] { tok.decode(Ids{-1}); }, {"id -1"});
}

TEST(TokenizerTiny, AddedTokensLongestMatchAndAllowSpecial) {
  ScratchDir dir("added");
  const Tokenizer tok = load(dir);
  const Ids user = byte_ids("user");
  EXPECT_EQ(tok.encode("<|im_start|>user\nhello<|im_end|>"), concat({{kImStart}, user, {'\n', kHello, kImEnd}}));
  EXPECT_EQ(tok.encode("<|end|><|endoftext|><|end"), concat({{kEnd, kEndOfText}, byte_ids("<|end")}));
  EXPECT_EQ(tok.encode("<|im_end|><|im_end|>"), (Ids{kImEnd, kImEnd}));
  EXPECT_EQ(tok.encode("<<think>>"), (Ids{'<', kThink, '>'}));
  // allow_special = false: special tokens are text ("<|" "im" "_end" "|>"), <think> (not special) still matches.
  EXPECT_EQ(tok.encode("<|im_end|><think>", false), concat({byte_ids("<|im_end|>"), {kThink}}));
  EXPECT_EQ(tok.decode(tok.encode("<|im_end|>", false)), "<|im_end|>");
}

TEST(TokenizerTiny, AddedTokensStripWhitespaceWhenAsked) {
  ScratchDir dir("strip");
  json::Value doc = tokenizer_json({});
  for (auto& t : doc["added_tokens"].as_array())
    if (t["content"].as_string() == "<|end|>") t["lstrip"] = true, t["rstrip"] = true;
  const std::string path = dir.write("tokenizer.json", json::dump(doc));
  const Tokenizer tok = Tokenizer::load(path);
  EXPECT_EQ(tok.encode("a \t<|end|>\n b"), (Ids{'a', kEnd, 'b'}));
  EXPECT_EQ(tok.encode("a\u3000<|end|>\u3000"), (Ids{'a', kEnd}));  // any Unicode whitespace, as in JavaScript
  EXPECT_EQ(tok.encode("a <|im_end|> b"), (Ids{'a', ' ', kImEnd, ' ', 'b'}));  // tokens without the flags keep it
}

TEST(TokenizerTiny, InvalidUtf8EmptyAndControlBytes) {
  ScratchDir dir("invalid");
  const Tokenizer tok = load(dir);
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode(Ids{}), "");
  // Ill-formed bytes are kept as bytes: "\xff\xfe" is one run of non-letters, then "hello".
  EXPECT_EQ(tok.encode("\xff\xfehello"), (Ids{0xff, 0xfe, kHello}));
  EXPECT_EQ(tok.decode(tok.encode("\xff\xfehello")), "\uFFFD\uFFFDhello");
  // A truncated 3-byte sequence is one unit (one U+FFFD), which like any non-letter may lead a word.
  EXPECT_EQ(tok.encode("\xe2\x82hello"), (Ids{0xe2, 0x82, kHello}));
  EXPECT_EQ(tok.decode(tok.encode("\xe2\x82hello")), "\uFFFDhello");
  EXPECT_EQ(tok.decode(Ids{0xe2, 0x82, 0xac}), "\u20AC");  // the bytes of one character across three tokens
  EXPECT_EQ(tok.decode(Ids{0xe2, 0x82, kImEnd, 0xac}), "\uFFFD<|im_end|>\uFFFD");
  EXPECT_EQ(tok.decode(Ids{0xed, 0xa0, 0x80}), "\uFFFD\uFFFD\uFFFD");  // a surrogate is ill-formed
  const std::string nul("a\0b", 3);
  EXPECT_EQ(tok.encode(nul), (Ids{'a', 0, 'b'}));
  EXPECT_EQ(tok.decode(tok.encode(nul)), nul);
}

TEST(TokenizerTiny, OneMegabyteLines) {
  ScratchDir dir("long");
  Options raw;
  raw.nfc = false;
  const Tokenizer tok = load(dir, raw);
  const auto start = std::chrono::steady_clock::now();
  // One piece of 2^20 letters: merged by the priority queue, pairwise from the left.
  const Ids as = tok.encode(std::string(1 << 20, 'a'));
  ASSERT_EQ(as.size(), size_t(1) << 19);
  EXPECT_TRUE(std::all_of(as.begin(), as.end(), [](int32_t id) { return id == kAa; }));
  // 1 MB of spaces is a single whitespace piece; 1 MB of random bytes (mostly ill-formed) and of random
  // printable text round-trip through decode.
  const std::string spaces(1 << 20, ' ');
  EXPECT_EQ(tok.decode(tok.encode(spaces)), spaces);
  std::mt19937_64 rng(test::fresh_seed());
  std::string random_bytes(1 << 20, '\0'), random_text(1 << 20, '\0');
  for (auto& c : random_bytes) c = char(rng());
  for (auto& c : random_text) c = " \tabcdefghijklmnopqrstuvwxyz0123456789.,'\n"[rng() % 42];
  EXPECT_EQ(tok.decode(tok.encode(random_bytes)), data::unicode::to_valid_utf8(random_bytes));
  EXPECT_EQ(tok.decode(tok.encode(random_text)), random_text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30.0) << "4 MB took " << seconds << " s: something is quadratic";
}

TEST(TokenizerTiny, NfcNormalizesBeforeSplitting) {
  ScratchDir dir("nfc"), raw_dir("raw");
  const Tokenizer tok = load(dir);
  EXPECT_EQ(tok.encode("e\u0301"), byte_ids("\u00e9"));
  EXPECT_EQ(tok.encode("\u212b"), byte_ids("\u00c5"));  // ANGSTROM SIGN → Å
  Options raw;
  raw.nfc = false;
  const Tokenizer raw_tok = load(raw_dir, raw);
  EXPECT_EQ(raw_tok.encode("e\u0301"), byte_ids("e\u0301"));
  // Without a normalizer any text round-trips exactly.
  const std::string sample = read_file(test::source_path("tests/data/tokenizer/multilingual.txt"));
  ASSERT_GT(sample.size(), 4000u);
  EXPECT_EQ(raw_tok.decode(raw_tok.encode(sample)), sample);
  std::string normalized;
  ASSERT_TRUE(data::unicode::nfc(sample, normalized));  // the sample has decomposed text on purpose
  EXPECT_EQ(tok.decode(tok.encode(sample)), normalized);
}

TEST(TokenizerTiny, Llama3DigitsIgnoreMergesAndStringMerges) {
  ScratchDir dir("llama3");
  Options llama3;
  llama3.llama3 = true;
  const Tokenizer tok = load(dir, llama3);
  EXPECT_EQ(tok.encode("12345"), byte_ids("12345"));  // same ids; the pieces differ (checked below)
  EXPECT_EQ(tok.encode("xyz"), (Ids{kXyz}));          // ignore_merges: a whole piece in the vocabulary wins
  EXPECT_EQ(tok.encode("hello world"), (Ids{kHello, kSpaceWorld}));  // "left right" merges load as pairs
}

TEST(TokenizerTiny, LoadErrorsNameFileAndKey) {
  ScratchDir dir("errors");
  const auto load_with = [&](const std::function<void(json::Value&)>& edit) {
    json::Value doc = tokenizer_json({});
    edit(doc);
    dir.write("tokenizer.json", json::dump(doc));
    Tokenizer::load((dir.path / "tokenizer.json").string());
  };
  const std::string file = (dir.path / "tokenizer.json").string();
  test::expect_error([&] { load_with([](json::Value& d) { d["normalizer"]["type"] = "NFKC"; }); },
                     {file, "normalizer.type", "NFKC"});
  test::expect_error(
      [&] {
        load_with([](json::Value& d) {
          d["pre_tokenizer"]["pretokenizers"].as_array()[0]["pattern"]["Regex"] = R"(\w+|\s+)";
        });
      },
      {file, "pre_tokenizer.pretokenizers[0].pattern.Regex", "Qwen2"});
  test::expect_error(
      [&] { load_with([](json::Value& d) {
              d["model"]["merges"].as_array().push_back(json::Array{"q", "zz"});
            }); },
      {file, "model.merges[12]", "right token"});
  test::expect_error([&] { load_with([](json::Value& d) { d["model"]["vocab"].as_object().erase("Ġ"); }); },
                     {file, "model.vocab", "0x20"});
  test::expect_error([&] { load_with([](json::Value& d) { d["model"]["type"] = "WordPiece"; }); },
                     {file, "model.type"});
  test::expect_error([&] { Tokenizer::load((dir.path / "missing").string()); }, {"missing", "does not exist"});
  dir.write("tokenizer.json", json::dump(tokenizer_json({})));
  dir.write("tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  test::expect_error([&] { Tokenizer::load(dir.path.string()); }, {"tokenizer_config.json", "eos_token", "<|nope|>"});
}

TEST(TokenizerTiny, ManyThreadsEncodeLikeOne) {
  ScratchDir dir("threads");
  const Tokenizer tok = load(dir);
  const std::string sample = read_file(test::source_path("tests/data/tokenizer/multilingual.txt"));
  const Ids expected = tok.encode(sample);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) got[t] = tok.encode(sample);
    });
  for (auto& th : threads) th.join();
  for (const auto& ids : got) EXPECT_EQ(ids, expected);
}

std::vector<std::string> pieces(data::SplitPattern pattern, std::string_view text) {
  const data::Pretokenizer pre(pattern);
  std::vector<std::string> out;
  std::array<size_t, 3> ends;  // small, to cross batch boundaries
  for (size_t pos = 0; pos < text.size();) {
    const size_t count = pre.split(text, pos, ends);
    for (size_t k = 0; k < count; ++k) {
      out.emplace_back(text.substr(pos, ends[k] - pos));
      pos = ends[k];
    }
  }
  return out;
}

// Expected pieces are what the JavaScript regex (String.prototype.match with the `u` flag) returns.
TEST(Pretokenizer, PiecesMatchTheRegex) {
  using P = data::SplitPattern;
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(P::Qwen2, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces(P::Qwen2, "I'm DON'T you'LL"), (V{"I", "'m", " DON", "'T", " you", "'LL"}));
  EXPECT_EQ(pieces(P::Qwen2, "  foo"), (V{" ", " foo"}));
  EXPECT_EQ(pieces(P::Qwen2, "a\n\nb"), (V{"a", "\n\n", "b"}));
  EXPECT_EQ(pieces(P::Qwen2, "a  \n  b"), (V{"a", "  \n", " ", " b"}));
  EXPECT_EQ(pieces(P::Qwen2, "x...\n\ny"), (V{"x", "...\n\n", "y"}));
  EXPECT_EQ(pieces(P::Qwen2, "12345"), (V{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(pieces(P::Llama3, "12345"), (V{"123", "45"}));
  EXPECT_EQ(pieces(P::Llama3, "$100 ab12cd"), (V{"$", "100", " ab", "12", "cd"}));
  EXPECT_EQ(pieces(P::Qwen2, "\tfoo"), (V{"\tfoo"}));
  EXPECT_EQ(pieces(P::Qwen2, "end   "), (V{"end", "   "}));
  EXPECT_EQ(pieces(P::Qwen2, "\u4f60\u597d\uff0c\u4e16\u754c"), (V{"\u4f60\u597d", "\uff0c\u4e16\u754c"}));
  EXPECT_EQ(pieces(P::Qwen2, "foo\r\nbar"), (V{"foo", "\r\n", "bar"}));
  EXPECT_EQ(pieces(P::Qwen2, "a \r\n b"), (V{"a", " \r\n", " b"}));
  EXPECT_EQ(pieces(P::Qwen2, "'hello 's'"), (V{"'hello", " '", "s", "'"}));
  EXPECT_EQ(pieces(P::Qwen2, "a \u3000b"), (V{"a", " ", "\u3000b"}));
  EXPECT_EQ(pieces(P::Qwen2, "  !x"), (V{" ", " !", "x"}));
  EXPECT_EQ(pieces(P::Qwen2, "x\n \n"), (V{"x", "\n \n"}));
  EXPECT_EQ(pieces(P::Qwen2, "\ufefftext"), (V{"\ufefftext"}));  // U+FEFF is \s in JavaScript
  EXPECT_EQ(pieces(P::Qwen2, "a\u0085b"), (V{"a", "\u0085b"}));  // U+0085 is not
  EXPECT_EQ(data::recognize_split_pattern(R"(\s+)"), std::nullopt);
}

TEST(Unicode, CharacterClasses) {
  EXPECT_EQ(data::unicode::char_class(U'\u00e9'), data::unicode::CharClass::Letter);
  EXPECT_EQ(data::unicode::char_class(U'\u0663'), data::unicode::CharClass::Number);
  EXPECT_EQ(data::unicode::char_class(U'\u3000'), data::unicode::CharClass::Space);
  EXPECT_EQ(data::unicode::char_class(U'\U0001F600'), data::unicode::CharClass::Other);
}

TEST(Unicode, WellFormedUtf8AndMaximalSubparts) {
  const auto unit = [](std::string_view s) {
    return data::unicode::decode(reinterpret_cast<const unsigned char*>(s.data()), s.size());
  };
  EXPECT_TRUE(unit("\xf4\x8f\xbf\xbf").valid);  // U+10FFFF
  EXPECT_EQ(unit("\xf4\x8f\xbf\xbf").cp, U'\U0010FFFF');
  for (const char* bad : {"\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80", "\xf0\x80\x80\x80",
                          "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\x80", "\xbf", "\xfe", "\xff"})
    EXPECT_FALSE(unit(bad).valid) << bad;
  EXPECT_EQ(unit("\xe2\x82").length, 2);  // truncated: the maximal subpart
  EXPECT_EQ(unit("\xe2\x82X").length, 2);
  EXPECT_EQ(unit("\xf0\x90\x80").length, 3);
  EXPECT_EQ(unit("\xed\xa0\x80").length, 1);  // ED A0 starts no well-formed sequence
  // Unicode's example of U+FFFD substitution (Table 3-8 of chapter 3).
  EXPECT_EQ(data::unicode::to_valid_utf8("\x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64"),
            "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd");
}

TEST(Unicode, NfcCases) {
  const auto nfc = [](const std::string& s) {
    std::string out;
    return data::unicode::nfc(s, out) ? out : s;
  };
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");   // conjoining jamo → syllable
  EXPECT_EQ(nfc("\uac00\u11a8"), "\uac01");         // LV syllable + T
  EXPECT_EQ(nfc("a\u0301\u0323"), "\u1ea1\u0301");  // reordered, then composed with the lower class first
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093c");         // excluded from composition
  EXPECT_EQ(nfc("\u212b"), "\u00c5");               // singleton
  EXPECT_EQ(nfc("\u0344"), "\u0308\u0301");         // non-starter decomposition
  EXPECT_EQ(nfc("\u0301a"), "\u0301a");             // a leading mark composes with nothing
  EXPECT_EQ(nfc("e\u0301\u0301"), "\u00e9\u0301");
  EXPECT_EQ(nfc("q\u0307\u0323"), "q\u0323\u0307");
  EXPECT_EQ(nfc("x\xff\u0301"), "x\xff\u0301");            // an ill-formed byte blocks composition
  EXPECT_EQ(nfc("a\U00011099\U000110BA"), "a\U0001109A");  // a 4-byte starter (Kaithi) composes too
  // Unicode 16: U+16121 = U+1611E U+1611E, so a composite can recompose with what precedes it.
  EXPECT_EQ(nfc("\U0001611E\U00016121"), "\U00016121\U0001611E");
  EXPECT_EQ(nfc("x\U0001611E\U00016122"), "x\U00016121\U00016129");
  std::string out = "untouched";
  EXPECT_FALSE(data::unicode::nfc("\u00e9t\u00e9 \uac01 \u4e2d", out));  // already NFC: reported unchanged
  EXPECT_EQ(out, "untouched");
}

TEST(BpeModel, ScanAndQueueMergeAlike) {
  // A random model over a 6-letter alphabet; both algorithms must give the same symbols on random words.
  std::mt19937_64 rng(test::fresh_seed());
  data::BpeModel::Vocab vocab;
  std::array<int32_t, 256> byte_ids{};
  std::vector<std::string> token_of;
  for (int b = 0; b < 256; ++b) {
    byte_ids[size_t(b)] = b;
    vocab.emplace(std::string(1, char(b)), b);
    token_of.emplace_back(1, char(b));
  }
  std::vector<data::BpeModel::Merge> merges;
  for (int i = 0; i < 300; ++i) {
    const int32_t l = int32_t('a' + rng() % 6), r = int32_t(rng() % 2 ? 'a' + rng() % 6 : rng() % token_of.size());
    const std::string merged = token_of[size_t(l)] + token_of[size_t(r)];
    if (vocab.count(merged)) continue;
    vocab.emplace(merged, int32_t(token_of.size()));
    merges.push_back({l, r, int32_t(token_of.size())});
    token_of.push_back(merged);
  }
  const data::BpeModel model(vocab, byte_ids, merges, false);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int32_t> word(1 + rng() % data::BpeModel::kScanLimit);
    for (auto& s : word) s = int32_t('a' + rng() % 6);
    auto by_scan = word, by_queue = word;
    by_scan.resize(model.merge_by_scan(by_scan));
    by_queue.resize(model.merge_by_queue(by_queue));
    ASSERT_EQ(by_scan, by_queue) << "trial " << trial;
    std::string joined;
    for (const int32_t id : by_scan) joined += token_of[size_t(id)];
    ASSERT_EQ(joined.size(), word.size());
  }
}

// ---- against the JavaScript reference -----------------------------------------------------------------------

// One document per file, or with `lines` one per line including its "\n" (as reference_ids.mjs --lines).
std::vector<std::string> documents(const std::string& text, bool lines) {
  if (!lines) return {text};
  std::vector<std::string> docs;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = text.find('\n', pos);
    const size_t end = nl == std::string::npos ? text.size() : nl + 1;
    docs.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return docs;
}

// The real corpus: every license text Debian ships, our multilingual sample, and the kernel documentation if
// tools/fetch-linux-doc.sh has been run (whole-document mode only: it is 21 MB).
std::vector<std::string> corpus_files(bool include_large) {
  std::vector<std::string> files;
  if (fs::is_directory("/usr/share/common-licenses"))
    for (const auto& e : fs::directory_iterator("/usr/share/common-licenses"))
      if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  files.push_back(test::source_path("tests/data/tokenizer/multilingual.txt"));
  const std::string linux_doc = test::source_path("data-cache/linux-doc/linux-doc.txt");
  if (include_large && fs::exists(linux_doc)) files.push_back(linux_doc);
  return files;
}

std::string file_list(const std::vector<std::string>& files) {
  std::string out;
  for (const auto& f : files) out += test::quoted(f) + " ";
  return out;
}

std::vector<json::Value> json_lines(const std::string& text) {
  std::vector<json::Value> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line, "reference output"));
  return out;
}

void expect_ids_match_reference(const std::string& model) {
  const std::string missing = test::js_reference_missing(model);
  if (!missing.empty()) GTEST_SKIP() << missing;
  const Tokenizer tok = Tokenizer::load(test::reference_tokenizer_dir(model));
  int64_t docs = 0, bytes = 0, tokens = 0, mismatches = 0;
  for (const bool lines : {false, true}) {
    const auto files = corpus_files(!lines);
    const auto reference = json_lines(test::run_node(
        "tools/tokenizer/reference_ids.mjs", "--model " + model + (lines ? " --lines " : " ") + file_list(files)));
    size_t r = 0;
    for (const auto& file : files) {
      for (const auto& doc : documents(read_file(file), lines)) {
        ASSERT_LT(r, reference.size()) << "the reference gave fewer documents";
        const Ids ours = tok.encode(doc);
        Ids theirs;
        for (const auto& v : reference[r++].as_object().find("ids")->as_array()) theirs.push_back(int32_t(v.as_int()));
        ++docs, bytes += int64_t(doc.size()), tokens += int64_t(theirs.size());
        if (ours != theirs) {
          ++mismatches;
          const auto diff = std::mismatch(ours.begin(), ours.end(), theirs.begin(), theirs.end());
          ADD_FAILURE() << model << ": " << file << (lines ? " line " : " doc ") << r - 1 << ": ids differ at token "
                        << (diff.first - ours.begin()) << " of " << theirs.size();
          if (mismatches > 10) return;
        }
        std::string normalized;  // Qwen3 normalizes to NFC, Llama-3 keeps the text as it is
        const bool changed = model == "qwen3" && data::unicode::nfc(doc, normalized);
        EXPECT_EQ(tok.decode(ours), changed ? normalized : doc);
      }
    }
    EXPECT_EQ(r, reference.size()) << "the reference gave more documents";
  }
  std::printf(
      "[ reference ] %s: %lld documents, %lld bytes, %lld tokens compared with the JavaScript reference, "
      "%lld mismatches\n",
      model.c_str(), (long long)docs, (long long)bytes, (long long)tokens, (long long)mismatches);
  EXPECT_EQ(mismatches, 0);
}

TEST(TokenizerReference, Qwen3IdsMatchJavaScript) { expect_ids_match_reference("qwen3"); }
TEST(TokenizerReference, Llama3IdsMatchJavaScript) { expect_ids_match_reference("llama3"); }

TEST(TokenizerReference, Qwen3DecodeMatchesJavaScript) {
  const std::string missing = test::js_reference_missing("qwen3");
  if (!missing.empty()) GTEST_SKIP() << missing;
  const Tokenizer tok = Tokenizer::load(test::reference_tokenizer_dir("qwen3"));
  // Random sequences of vocabulary tokens, lone high bytes (ill-formed UTF-8 on their own) and added tokens.
  std::mt19937_64 rng(test::fresh_seed());
  const int32_t added_first = *tok.token_id("<|endoftext|>");
  std::vector<Ids> sequences(3000);
  std::string lines;
  for (auto& ids : sequences) {
    ids.resize(1 + rng() % 12);
    for (auto& id : ids) {
      const auto kind = rng() % 10;
      if (kind < 5)
        id = int32_t(rng() % uint64_t(added_first));
      else if (kind < 9)
        id = *tok.token_id(byte_token(int(0x80 + rng() % 0x80)));
      else
        id = added_first + int32_t(rng() % uint64_t(tok.vocab_size() - added_first));
    }
    std::string line;
    for (const int32_t id : ids) line += (line.empty() ? "[" : ",") + std::to_string(id);
    lines += line + "]\n";
  }
  ScratchDir dir("decode");
  const auto reference = json_lines(
      test::run_node("tools/tokenizer/reference_ids.mjs", "--decode " + test::quoted(dir.write("ids.txt", lines))));
  ASSERT_EQ(reference.size(), sequences.size());
  for (size_t i = 0; i < sequences.size(); ++i)
    ASSERT_EQ(tok.decode(sequences[i]), reference[i].as_object().find("text")->as_string()) << lines.substr(0, 200);
}

// "U+0041 U+030A" for messages (the text itself may not render).
std::string code_points(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const auto u = data::unicode::decode(reinterpret_cast<const unsigned char*>(text.data()) + i, text.size() - i);
    out += fmt::format("{}U+{:04X}", out.empty() ? "" : " ", uint32_t(u.cp));
    i += u.length;
  }
  return out;
}

TEST(TokenizerReference, NfcMatchesJavaScript) {
  const std::string missing = test::js_reference_missing("qwen3");
  if (!missing.empty()) GTEST_SKIP() << missing;
  namespace ut = data::unicode_tables;
  // Every code point alone (surrogates, CR and LF excepted), then random sequences of starters that compose,
  // marks of every class and Hangul jamo.
  std::string text;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if ((cp >= 0xd800 && cp <= 0xdfff) || cp == '\n' || cp == '\r') continue;
    data::unicode::append_utf8(cp, text);
    text += '\n';
  }
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto pick = [&]() -> char32_t {
    switch (rng() % 5) {
      case 0: return ut::kCompositions[rng() % ut::kCompositions_size].first;
      case 1: return ut::kCompositions[rng() % ut::kCompositions_size].second;
      case 2: return ut::kCombiningRanks[rng() % ut::kCombiningRanks_size].cp;
      case 3: return char32_t(0x1100 + rng() % 0x100);  // jamo
      default: return ut::kDecompositions[rng() % ut::kDecompositions_size].cp;
    }
  };
  for (int line = 0; line < 50000; ++line) {
    for (uint64_t k = 1 + rng() % 8; k > 0; --k) data::unicode::append_utf8(pick(), text);
    text += '\n';
  }
  ScratchDir dir("nfc");
  const auto reference = json_lines(
      test::run_node("tools/tokenizer/reference_ids.mjs", "--nfc --lines " + test::quoted(dir.write("nfc.txt", text))));
  const auto docs = documents(text, true);
  ASSERT_EQ(reference.size(), docs.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    std::string ours;
    if (!data::unicode::nfc(docs[i], ours)) ours = docs[i];
    const std::string& theirs = reference[i].as_object().find("text")->as_string();
    if (ours != theirs && ++mismatches <= 10)
      ADD_FAILURE() << "NFC differs for line " << i << ": " << code_points(docs[i]) << " → ours " << code_points(ours)
                    << ", JavaScript " << code_points(theirs);
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace primer
