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
  // The manifest as data::TokenManifest writes it, with its checksums in hex as inspect shows every CRC32C.
  json::Value manifest = json::parse(m.to_json(), (dir / data::kTokenManifestName).string());
  auto hex_crc = [](json::Value& entry) { entry["crc32c"] = fmt::format("{:08x}", entry["crc32c"].as_int()); };
  hex_crc(manifest["tokenizer"]);
  for (json::Value& shard : manifest["shards"].as_array()) hex_crc(shard);
  json::Value r;
  r["kind"] = "tokenized data";
  r["path"] = dir.string();
  for (const char* key : {"format_version", "tokenizer", "documents", "tokens", "sources", "shards"})
    r[key] = std::move(manifest[key]);
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
