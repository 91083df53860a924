// The documents of one or more tokenized-data directories (manifest.json + shards), numbered globally in
// order of directory, shard and position. Sources are numbered the same way: directory 0's sources first.
// All directories must come from the same tokenizer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/token_shards.h"

namespace primer::data {

class TokenCorpus {
 public:
  // verify: check every shard's CRC32C and token ids on open (one read of the data; see TokenShard::open).
  static TokenCorpus open(const std::vector<std::string>& dirs, bool verify);

  int64_t documents() const { return doc_start_.back(); }
  int64_t tokens() const { return tokens_; }
  DocumentView document(int64_t doc) const;  // source is the global source id
  int64_t document_length(int64_t doc) const;

  int64_t sources() const { return int64_t(sources_.size()); }
  const SourceInfo& source(int64_t s) const { return sources_[size_t(s)]; }
  const TokenizerIdentity& tokenizer() const { return tokenizer_; }
  const std::vector<std::string>& dirs() const { return dirs_; }
  // Identifies the data: the shards' CRC32Cs and sizes in order (a resume cursor refuses other data).
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  struct Shard {
    TokenShard shard;
    int32_t source_base;  // global id of the directory's source 0
  };
  std::pair<const Shard*, int64_t> locate(int64_t doc) const;

  std::vector<std::string> dirs_;
  std::vector<Shard> shards_;
  std::vector<int64_t> doc_start_{0};  // shard i holds documents [doc_start_[i], doc_start_[i + 1])
  std::vector<SourceInfo> sources_;
  TokenizerIdentity tokenizer_;
  int64_t tokens_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace primer::data
