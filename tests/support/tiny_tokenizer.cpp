#include "tests/support/tiny_tokenizer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <tuple>

#include "data/unicode.h"
#include "tests/support/test_util.h"

namespace primer::test::tiny {

namespace fs = std::filesystem;

// GPT-2's byte-to-unicode alphabet, written out independently of data/tokenizer.cpp.
std::string byte_token(int b) {
  char32_t cp = char32_t(b);
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
    cp = 256;
    for (int x = 0; x < b; ++x)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++cp;
  }
  std::string s;
  data::unicode::append_utf8(cp, s);
  return s;
}

json::Value tokenizer_json(const Options& options) {
  json::Object vocab;
  for (int b = 0; b < 256; ++b) vocab.set(byte_token(b), b);
  json::Array merges;
  for (const auto& m : kMerges) {
    vocab.set(std::string(m.left) + m.right, m.id);
    if (options.llama3)
      merges.emplace_back(std::string(m.left) + " " + m.right);
    else
      merges.emplace_back(json::Array{m.left, m.right});
  }
  vocab.set("xyz", kXyz);
  json::Value doc;
  doc["version"] = "1.0";
  json::Array added;
  for (const auto& [content, id, special] :
       {std::tuple{"<|endoftext|>", kEndOfText, true}, std::tuple{"<|im_start|>", kImStart, true},
        std::tuple{"<|im_end|>", kImEnd, true}, std::tuple{"<think>", kThink, false}, std::tuple{"<|end|>", kEnd, true},
        std::tuple{"</think>", kThinkEnd, false}}) {
    json::Value t;
    t["id"] = id, t["content"] = content, t["single_word"] = false, t["lstrip"] = false, t["rstrip"] = false;
    t["normalized"] = false, t["special"] = special;
    added.push_back(t);
  }
  doc["added_tokens"] = added;
  if (options.nfc)
    doc["normalizer"]["type"] = "NFC";
  else
    doc["normalizer"] = nullptr;
  const std::string digits = options.llama3 ? R"(\p{N}{1,3})" : R"(\p{N})";
  json::Value split, byte_level;
  split["type"] = "Split";
  split["pattern"]["Regex"] = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|)" + digits +
                              R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  split["behavior"] = "Isolated", split["invert"] = false;
  byte_level["type"] = "ByteLevel", byte_level["add_prefix_space"] = false, byte_level["use_regex"] = false;
  doc["pre_tokenizer"]["type"] = "Sequence";
  doc["pre_tokenizer"]["pretokenizers"] = json::Array{split, byte_level};
  doc["decoder"]["type"] = "ByteLevel";
  json::Value& model = doc["model"];
  model["type"] = "BPE", model["dropout"] = nullptr, model["byte_fallback"] = false;
  model["ignore_merges"] = options.llama3;
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merges);
  return doc;
}

ScratchDir::ScratchDir(const std::string& name)
    : path(fs::temp_directory_path() / fmt::format("primer-tok-{}-{}-{}", name, ::getpid(), fresh_seed())) {
  fs::create_directories(path);
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  fs::remove_all(path, ignored);
}

std::string ScratchDir::write(const std::string& name, const std::string& text) const {
  std::ofstream(path / name, std::ios::binary) << text;
  return (path / name).string();
}

data::Tokenizer load(const ScratchDir& dir, const Options& options) {
  dir.write("tokenizer.json", json::dump(tokenizer_json(options)));
  dir.write("tokenizer_config.json", R"({"eos_token": {"content": "<|im_end|>"}, "bos_token": null})");
  return data::Tokenizer::load(dir.path.string());
}

}  // namespace primer::test::tiny
