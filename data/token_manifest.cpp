#include "data/token_manifest.h"

#include <filesystem>

#include "core/check.h"
#include "core/io/json.h"
#include "core/io/mapped_file.h"

namespace primer::data {

int64_t TokenManifest::documents() const {
  int64_t n = 0;
  for (const ShardInfo& s : shards) n += s.documents;
  return n;
}

int64_t TokenManifest::tokens() const {
  int64_t n = 0;
  for (const ShardInfo& s : shards) n += s.tokens;
  return n;
}

std::string TokenManifest::to_json() const {
  json::Value tok;
  tok["name"] = tokenizer.name;
  tok["crc32c"] = int64_t(tokenizer.crc32c);
  tok["vocab_size"] = tokenizer.vocab_size;
  tok["eos_id"] = tokenizer.eos_id;
  json::Array source_list;
  for (const SourceInfo& s : sources) {
    json::Value e;
    e["name"] = s.name;
    e["format"] = s.format;
    e["files"] = s.files;
    e["documents"] = s.documents;
    e["tokens"] = s.tokens;
    e["skipped"] = s.skipped;
    source_list.push_back(std::move(e));
  }
  json::Array shard_list;
  for (const ShardInfo& s : shards) {
    json::Value e;
    e["name"] = s.name;
    e["documents"] = s.documents;
    e["tokens"] = s.tokens;
    e["bytes"] = int64_t(s.bytes);
    e["crc32c"] = int64_t(s.crc32c);
    shard_list.push_back(std::move(e));
  }
  json::Value doc;
  doc["format"] = "primer-token-data";
  doc["format_version"] = format_version;
  doc["tokenizer"] = std::move(tok);
  doc["documents"] = documents();
  doc["tokens"] = tokens();
  doc["sources"] = std::move(source_list);
  doc["shards"] = std::move(shard_list);
  return json::dump(doc, 1) + "\n";
}

TokenManifest TokenManifest::parse(const std::string& text, const std::string& source_name) {
  const json::Value doc = json::parse(text, source_name);
  const json::Node root(doc, source_name);
  if (root.at("format").as_string() != "primer-token-data") root.at("format").fail("expected \"primer-token-data\"");
  TokenManifest m;
  m.format_version = int(root.at("format_version").as_int());
  if (m.format_version != kTokenDataFormatVersion)
    root.at("format_version")
        .fail(fmt::format("this build reads version {}, the file has {}", kTokenDataFormatVersion, m.format_version));
  const json::Node tok = root.at("tokenizer");
  m.tokenizer.name = tok.at("name").as_string();
  m.tokenizer.crc32c = uint32_t(tok.at("crc32c").as_int());
  m.tokenizer.vocab_size = tok.at("vocab_size").as_int();
  m.tokenizer.eos_id = int32_t(tok.at("eos_id").as_int());
  if (m.tokenizer.vocab_size <= 0 || m.tokenizer.eos_id < 0 || m.tokenizer.eos_id >= m.tokenizer.vocab_size)
    tok.fail(fmt::format("eos_id {} outside the vocabulary of {}", m.tokenizer.eos_id, m.tokenizer.vocab_size));
  const json::Node sources = root.at("sources");
  for (size_t i = 0; i < sources.size(); ++i) {
    const json::Node s = sources.at(i);
    m.sources.push_back({s.at("name").as_string(), s.at("format").as_string(), s.at("files").as_int(),
                         s.at("documents").as_int(), s.at("tokens").as_int(), s.at("skipped").as_int()});
  }
  if (m.sources.empty()) sources.fail("lists no source");
  const json::Node shards = root.at("shards");
  for (size_t i = 0; i < shards.size(); ++i) {
    const json::Node s = shards.at(i);
    ShardInfo info{s.at("name").as_string(), s.at("documents").as_int(), s.at("tokens").as_int(),
                   uint64_t(s.at("bytes").as_int()), uint32_t(s.at("crc32c").as_int())};
    if (info.name.empty() || info.name.find('/') != std::string::npos)
      s.at("name").fail("expected a file name inside the directory");
    m.shards.push_back(std::move(info));
  }
  int64_t source_documents = 0, source_tokens = 0;
  for (const SourceInfo& s : m.sources) source_documents += s.documents, source_tokens += s.tokens;
  if (root.at("documents").as_int() != m.documents() || source_documents != m.documents())
    root.at("documents")
        .fail(fmt::format("says {}, the shards hold {} and the sources {}", root.at("documents").as_int(),
                          m.documents(), source_documents));
  if (root.at("tokens").as_int() != m.tokens() || source_tokens != m.tokens())
    root.at("tokens").fail(fmt::format("says {}, the shards hold {} and the sources {}", root.at("tokens").as_int(),
                                       m.tokens(), source_tokens));
  return m;
}

TokenManifest TokenManifest::read(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kTokenManifestName).string();
  PRIMER_CHECK(std::filesystem::is_regular_file(path),
               "'{}' is not a tokenized-data directory: it has no {} (write one with `primer tokenize`)", dir,
               kTokenManifestName);
  const io::MappedFile file(path);
  return parse(std::string(file.text()), path);
}

}  // namespace primer::data
