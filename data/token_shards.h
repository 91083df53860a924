// Token shards: HDF5 files holding tokenized documents, the unit `primer tokenize` writes and the loader reads.
//   /tokens       i32 [N]      every document's token ids, back to back
//   /doc_offsets  i64 [D + 1]  CSR: document d is tokens[doc_offsets[d], doc_offsets[d + 1])
//   /loss_mask    u8  [N]      1 where the token is a training target (all ones for pre-training text)
//   /source_ids   i32 [D]      each document's source, an index into the directory manifest's sources
// Root attributes: format "primer-token-shard", format_version, documents, tokens, tokenizer (name),
// tokenizer_crc32c, vocab_size, eos_id. Datasets are contiguous and 64-byte aligned, so readers memory-map
// them (no copy, pages read on demand); integrity comes from the whole-file CRC32C in the manifest.
// docs/data.md ("Tokenized data and the loader") explains the choice with measurements.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/io/mapped_file.h"
#include "data/token_manifest.h"

namespace primer::data {

// Collects documents in memory and writes them as one shard on commit(). Nothing appears under the final
// path before commit() succeeds: the file is written as ".<name>.tmp-<pid>" beside it, fsynced and renamed.
// An error during commit, or destruction without commit, removes the temporary.
class TokenShardWriter {
 public:
  TokenShardWriter(std::string path, TokenizerIdentity tokenizer);
  ~TokenShardWriter();
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;

  // loss_mask: empty (all ones) or one 0/1 value per token. Documents must not be empty.
  void add(std::span<const int32_t> tokens, std::span<const uint8_t> loss_mask, int32_t source);
  int64_t documents() const { return int64_t(doc_offsets_.size()) - 1; }
  int64_t tokens() const { return int64_t(tokens_.size()); }
  // Writes, fsyncs and renames into place (then fsyncs the directory); returns the manifest entry.
  ShardInfo commit();

 private:
  std::string path_, temp_path_;
  TokenizerIdentity tokenizer_;
  std::vector<int32_t> tokens_;
  std::vector<int64_t> doc_offsets_{0};
  std::vector<uint8_t> loss_mask_;
  std::vector<int32_t> source_ids_;
  bool committed_ = false;
};

// Writes a whole tokenized-data directory: documents fill shards of about `shard_tokens` tokens
// (shard-00000.h5, ...), finish() writes manifest.json and publishes the directory in one rename. Everything
// is staged in ".<name>.tmp-<pid>" beside the final directory, so an error or a kill before finish() leaves
// no shard and no manifest under the final name (the destructor removes the staging directory; a killed
// process leaves it hidden). An existing output directory is replaced only if it is empty or tokenized data.
class TokenDatasetWriter {
 public:
  // sources: name, format and files of each source (counts are filled in here).
  TokenDatasetWriter(std::string dir, TokenizerIdentity tokenizer, std::vector<SourceInfo> sources,
                     int64_t shard_tokens);
  ~TokenDatasetWriter();
  TokenDatasetWriter(const TokenDatasetWriter&) = delete;
  TokenDatasetWriter& operator=(const TokenDatasetWriter&) = delete;

  void add(std::span<const int32_t> tokens, std::span<const uint8_t> loss_mask, int32_t source);
  void count_skipped(int32_t source, int64_t records = 1);
  int64_t bytes_written() const { return bytes_written_; }  // of the shards committed so far
  TokenManifest finish();

 private:
  void commit_shard();

  std::string dir_, staging_;
  TokenManifest manifest_;
  int64_t shard_tokens_;
  std::unique_ptr<TokenShardWriter> shard_;
  int64_t bytes_written_ = 0;
  bool finished_ = false;
};

// One document of a shard: views that stay valid while the shard is open.
struct DocumentView {
  std::span<const int32_t> tokens;
  std::span<const uint8_t> loss_mask;
  int32_t source = 0;
};

// A shard opened for reading and validated against its manifest entry: always the byte size, attributes,
// dataset shapes, document offsets and source ids; with `verify` also the file's CRC32C and every token id
// and mask value (one pass over the file). Errors name the file and the dataset or attribute at fault.
class TokenShard {
 public:
  static TokenShard open(const std::string& path, const ShardInfo& expected, const TokenizerIdentity& tokenizer,
                         int64_t sources, bool verify);

  int64_t documents() const { return int64_t(doc_offsets_.size()) - 1; }
  int64_t tokens() const { return int64_t(tokens_.size()); }
  DocumentView document(int64_t d) const;
  int64_t document_length(int64_t d) const { return doc_offsets_[size_t(d + 1)] - doc_offsets_[size_t(d)]; }
  bool memory_mapped() const { return mapped_; }  // every dataset served by the map, none copied
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  io::MappedFile file_;  // owns the bytes the spans point into when mapped (a move keeps the mapping's address)
  std::vector<int32_t> tokens_copy_, sources_copy_;  // read copies for layouts a map cannot serve
  std::vector<int64_t> offsets_copy_;
  std::vector<uint8_t> mask_copy_;
  std::span<const int32_t> tokens_, source_ids_;
  std::span<const int64_t> doc_offsets_;
  std::span<const uint8_t> loss_mask_;
  bool mapped_ = false;
};

}  // namespace primer::data
