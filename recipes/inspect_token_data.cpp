// `primer inspect` on tokenized data: the manifest's tokenizer, sources and shards; verified, each shard's CRC32C
// and every token id, mask value, document offset and source id (TokenShard's own verification).
#include <filesystem>

#include "data/token_manifest.h"
#include "data/token_shards.h"
#include "recipes/inspect_parts.h"

namespace primer::recipes::inspect {
namespace fs = std::filesystem;

json::Value describe_token_data(const fs::path& dir, bool verify) {
  const data::TokenManifest m = data::TokenManifest::read(dir.string());
  json::Value r;
  r["kind"] = "tokenized data";
  r["path"] = dir.string();
  r["format_version"] = m.format_version;
  json::Value& tokenizer = r["tokenizer"];
  tokenizer["name"] = m.tokenizer.name;
  tokenizer["crc32c"] = fmt::format("{:08x}", m.tokenizer.crc32c);
  tokenizer["vocab_size"] = m.tokenizer.vocab_size;
  tokenizer["eos_id"] = m.tokenizer.eos_id;
  r["documents"] = m.documents();
  r["tokens"] = m.tokens();
  json::Array sources;
  for (const data::SourceInfo& s : m.sources) {
    json::Value e;
    e["name"] = s.name;
    e["format"] = s.format;
    e["files"] = s.files;
    e["documents"] = s.documents;
    e["tokens"] = s.tokens;
    e["skipped"] = s.skipped;
    sources.push_back(std::move(e));
  }
  r["sources"] = std::move(sources);
  json::Array shards;
  for (const data::ShardInfo& s : m.shards) {
    json::Value e;
    e["name"] = s.name;
    e["documents"] = s.documents;
    e["tokens"] = s.tokens;
    e["bytes"] = int64_t(s.bytes);
    e["crc32c"] = fmt::format("{:08x}", s.crc32c);
    shards.push_back(std::move(e));
  }
  r["shards"] = std::move(shards);
  if (!verify) return r;
  Verification v;
  for (const data::ShardInfo& s : m.shards)
    v.run([&] {
      data::TokenShard::open((dir / s.name).string(), s, m.tokenizer, int64_t(m.sources.size()), true);
      v.count("shards with CRC32C, token ids and offsets");
    });
  r["verify"] = v.to_json();
  return r;
}

}  // namespace primer::recipes::inspect
