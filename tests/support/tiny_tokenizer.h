// A small hand-made byte-level BPE tokenizer.json whose ids can be worked out by hand: ids 0-255 are the bytes
// (id = byte value), then a few merges in rank order, then added tokens named like Qwen3's. Used by the tokenizer
// and chat-format tests.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "core/io/json.h"
#include "data/tokenizer.h"

namespace primer::test::tiny {

struct Merge {
  const char *left, *right;
  int32_t id;
};
// "Ġ" is the byte-level space.
constexpr Merge kMerges[] = {
    {"h", "e", 256},   {"l", "l", 257}, {"he", "ll", 258},   {"hell", "o", 259}, {"Ġ", "w", 260}, {"o", "r", 261},
    {"Ġw", "or", 262}, {"l", "d", 263}, {"Ġwor", "ld", 264}, {"a", "a", 265},    {"b", "c", 266}, {"a", "b", 267},
};
constexpr int32_t kHello = 259, kSpaceWorld = 264, kOr = 261, kLd = 263, kAa = 265, kBc = 266;
constexpr int32_t kXyz = 268;  // a vocabulary token that no merge produces (for ignore_merges)
// Added tokens: special except <think> and </think>; ids 269-299 are unused.
constexpr int32_t kEndOfText = 300, kImStart = 301, kImEnd = 302, kThink = 303, kEnd = 304, kThinkEnd = 305;

struct Options {
  bool nfc = true;
  bool llama3 = false;  // the \p{N}{1,3} regex, ignore_merges, merges written as "left right"
};

// The token string of byte b in GPT-2's byte-to-unicode alphabet (written independently of data/).
std::string byte_token(int b);

json::Value tokenizer_json(const Options& options);

// A temporary directory, removed with everything in it.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name);
  ~ScratchDir();
  std::string write(const std::string& name, const std::string& text) const;  // returns the file's path
};

// Writes tokenizer.json and a tokenizer_config.json (eos <|im_end|>) into `dir` and loads them.
data::Tokenizer load(const ScratchDir& dir, const Options& options = {});

}  // namespace primer::test::tiny
