#include "data/token_corpus.h"

#include <algorithm>
#include <filesystem>

#include "core/check.h"
#include "core/rng.h"

namespace primer::data {

TokenCorpus TokenCorpus::open(const std::vector<std::string>& dirs, bool verify) {
  PRIMER_CHECK(!dirs.empty(), "no tokenized-data directory given");
  TokenCorpus c;
  c.dirs_ = dirs;
  for (size_t i = 0; i < dirs.size(); ++i) {
    const TokenManifest m = TokenManifest::read(dirs[i]);
    if (i == 0) {
      c.tokenizer_ = m.tokenizer;
    } else {
      PRIMER_CHECK(m.tokenizer.same_as(c.tokenizer_),
                   "'{}' was tokenized with '{}' (CRC32C {:08x}, vocabulary {}), '{}' with '{}' (CRC32C {:08x}, "
                   "vocabulary {}); their ids cannot be mixed",
                   dirs[i], m.tokenizer.name, m.tokenizer.crc32c, m.tokenizer.vocab_size, dirs[0], c.tokenizer_.name,
                   c.tokenizer_.crc32c, c.tokenizer_.vocab_size);
    }
    const int32_t source_base = int32_t(c.sources_.size());
    c.sources_.insert(c.sources_.end(), m.sources.begin(), m.sources.end());
    for (const ShardInfo& info : m.shards) {
      const std::string path = (std::filesystem::path(dirs[i]) / info.name).string();
      c.shards_.push_back({TokenShard::open(path, info, m.tokenizer, int64_t(m.sources.size()), verify), source_base});
      c.doc_start_.push_back(c.doc_start_.back() + info.documents);
      c.tokens_ += info.tokens;
      c.fingerprint_ = key_for(c.fingerprint_ ^ info.crc32c, fmt::format("{}:{}", info.bytes, info.tokens));
    }
  }
  PRIMER_CHECK(c.documents() > 0, "the tokenized data in '{}'{} holds no document", dirs[0],
               dirs.size() > 1 ? fmt::format(" and {} more directories", dirs.size() - 1) : "");
  return c;
}

std::pair<const TokenCorpus::Shard*, int64_t> TokenCorpus::locate(int64_t doc) const {
  PRIMER_CHECK(doc >= 0 && doc < documents(), "document {} of a corpus of {}", doc, documents());
  const size_t shard = size_t(std::upper_bound(doc_start_.begin(), doc_start_.end(), doc) - doc_start_.begin()) - 1;
  return {&shards_[shard], doc - doc_start_[shard]};
}

DocumentView TokenCorpus::document(int64_t doc) const {
  const auto [shard, local] = locate(doc);
  DocumentView view = shard->shard.document(local);
  view.source += shard->source_base;
  return view;
}

int64_t TokenCorpus::document_length(int64_t doc) const {
  const auto [shard, local] = locate(doc);
  return shard->shard.document_length(local);
}

}  // namespace primer::data
