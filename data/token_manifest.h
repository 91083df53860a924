// manifest.json of a tokenized-data directory (written by `primer tokenize`): the tokenizer that produced the
// ids, the sources (name, format, counts) and every shard file with its counts, byte size and CRC32C. It is
// written last, atomically, so a directory with a manifest is complete; readers open shards only through it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace primer::data {

inline constexpr int kTokenDataFormatVersion = 1;
inline constexpr const char* kTokenManifestName = "manifest.json";

// Which tokenizer produced the ids, so that shards of different tokenizers are never mixed silently.
struct TokenizerIdentity {
  std::string name;     // as configured (a path or a name); informative
  uint32_t crc32c = 0;  // of the tokenizer's definition (tokenizer.json bytes): the identity compared
  int64_t vocab_size = 0;
  int32_t eos_id = 0;  // appended to pre-training documents; the loader pads with it
  bool same_as(const TokenizerIdentity& o) const { return crc32c == o.crc32c && vocab_size == o.vocab_size; }
};

struct SourceInfo {
  std::string name;
  std::string format;  // text, jsonl or chat
  int64_t files = 0;
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t skipped = 0;  // malformed or empty records left out
};

struct ShardInfo {
  std::string name;  // file name inside the directory
  int64_t documents = 0;
  int64_t tokens = 0;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

struct TokenManifest {
  int format_version = kTokenDataFormatVersion;
  TokenizerIdentity tokenizer;
  std::vector<SourceInfo> sources;  // a shard's source id indexes this list
  std::vector<ShardInfo> shards;

  int64_t documents() const;
  int64_t tokens() const;
  std::string to_json() const;
  // Parses and validates (format, version, counts that add up); errors name `source_name` and the key.
  static TokenManifest parse(const std::string& text, const std::string& source_name);
  static TokenManifest read(const std::string& dir);  // <dir>/manifest.json
};

}  // namespace primer::data
