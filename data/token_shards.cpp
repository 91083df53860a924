#include "data/token_shards.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/check.h"
#include "core/io/crc32c.h"
#include "core/io/durable_file.h"
#include "core/io/hdf5_file.h"

namespace primer::data {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "primer-token-shard";
constexpr uint64_t kAlignment = 64;  // contiguous datasets start on a cache line: any element type maps aligned

std::string parent_dir(const std::string& path) {
  const std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// A view of dataset `name` holding `n` elements of T: straight into the map when the layout allows, else a
// converted copy in `copy`.
template <class T> std::span<const T> dataset_view(const io::Hdf5File& h5, const io::MappedFile& map,
                                                   const std::string& name, int64_t n, std::vector<T>& copy,
                                                   bool& mapped) {
  if (n == 0) return {};
  if (const auto offset = h5.data_offset<T>(name)) {
    const uint64_t end = *offset + uint64_t(n) * sizeof(T);
    PRIMER_CHECK(end <= map.size(), "token shard '{}': dataset '{}' claims bytes [{}, {}) of a {}-byte file", h5.path(),
                 name, *offset, end, map.size());
    if (*offset % alignof(T) == 0) return {reinterpret_cast<const T*>(map.data() + *offset), size_t(n)};
  }
  mapped = false;
  copy.resize(size_t(n));
  h5.read(name, {n}, copy.data());
  return copy;
}

void expect_attribute(const io::Hdf5File& h5, const char* name, int64_t expected, const char* what) {
  const int64_t got = h5.attribute<int64_t>("/", name);
  PRIMER_CHECK(got == expected, "token shard '{}': attribute '{}' is {}, {} says {}", h5.path(), name, got, what,
               expected);
}

}  // namespace

// ---- writing ----

TokenShardWriter::TokenShardWriter(std::string path, TokenizerIdentity tokenizer)
    : path_(std::move(path)), tokenizer_(std::move(tokenizer)) {
  const fs::path p(path_);
  PRIMER_CHECK(!p.filename().empty(), "token shard path '{}' names no file", path_);
  temp_path_ = (p.parent_path() / fmt::format(".{}.tmp-{}", p.filename().string(), ::getpid())).string();
}

TokenShardWriter::~TokenShardWriter() {
  if (!committed_) std::remove(temp_path_.c_str());  // best effort: an error may be unwinding already
}

void TokenShardWriter::add(std::span<const int32_t> tokens, std::span<const uint8_t> loss_mask, int32_t source) {
  PRIMER_CHECK(!committed_, "token shard '{}': add() after commit()", path_);
  PRIMER_CHECK(!tokens.empty(), "token shard '{}': document {} is empty", path_, documents());
  PRIMER_CHECK(loss_mask.empty() || loss_mask.size() == tokens.size(),
               "token shard '{}': document {} has {} tokens but {} loss-mask values", path_, documents(), tokens.size(),
               loss_mask.size());
  PRIMER_CHECK(source >= 0, "token shard '{}': negative source id {}", path_, source);
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  if (loss_mask.empty())
    loss_mask_.resize(tokens_.size(), 1);
  else
    loss_mask_.insert(loss_mask_.end(), loss_mask.begin(), loss_mask.end());
  doc_offsets_.push_back(int64_t(tokens_.size()));
  source_ids_.push_back(source);
}

ShardInfo TokenShardWriter::commit() {
  PRIMER_CHECK(!committed_, "token shard '{}' committed twice", path_);
  io::FileDigest digest;
  try {
    io::Hdf5File h5 = io::Hdf5File::create(temp_path_, kAlignment);
    const auto layout = io::Hdf5Layout::Contiguous;
    h5.write("/tokens", {tokens()}, tokens_.data(), layout);
    h5.write("/doc_offsets", {documents() + 1}, doc_offsets_.data(), layout);
    h5.write("/loss_mask", {tokens()}, loss_mask_.data(), layout);
    h5.write("/source_ids", {documents()}, source_ids_.data(), layout);
    h5.set_string_attribute("/", "format", kFormat);
    h5.set_attribute<int64_t>("/", "format_version", kTokenDataFormatVersion);
    h5.set_attribute<int64_t>("/", "documents", documents());
    h5.set_attribute<int64_t>("/", "tokens", tokens());
    h5.set_string_attribute("/", "tokenizer", tokenizer_.name);
    h5.set_attribute<int64_t>("/", "tokenizer_crc32c", tokenizer_.crc32c);
    h5.set_attribute<int64_t>("/", "vocab_size", tokenizer_.vocab_size);
    h5.set_attribute<int64_t>("/", "eos_id", tokenizer_.eos_id);
    h5.close();
    digest = io::digest_and_sync(temp_path_);
    std::error_code ec;
    fs::rename(temp_path_, path_, ec);
    PRIMER_CHECK(!ec, "cannot rename '{}' to '{}': {}", temp_path_, path_, ec.message());
  } catch (...) {
    std::remove(temp_path_.c_str());
    throw;
  }
  committed_ = true;
  io::sync_directory(parent_dir(path_));
  return {fs::path(path_).filename().string(), documents(), tokens(), digest.bytes, digest.crc32c};
}

// ---- a directory of shards ----

TokenDatasetWriter::TokenDatasetWriter(std::string dir, TokenizerIdentity tokenizer, std::vector<SourceInfo> sources,
                                       int64_t shard_tokens)
    : dir_(std::move(dir)), shard_tokens_(shard_tokens) {
  PRIMER_CHECK(shard_tokens_ > 0, "tokens per shard must be positive, got {}", shard_tokens_);
  PRIMER_CHECK(!sources.empty(), "tokenized data '{}' needs at least one source", dir_);
  fs::path final_dir = fs::path(dir_).lexically_normal();
  if (final_dir.filename().empty()) final_dir = final_dir.parent_path();  // "out/" names "out"
  PRIMER_CHECK(!final_dir.filename().empty() && final_dir.filename() != "..",
               "output directory '{}' names no directory", dir_);
  if (fs::exists(final_dir)) {
    PRIMER_CHECK(fs::is_directory(final_dir) && (fs::is_empty(final_dir) || fs::exists(final_dir / kTokenManifestName)),
                 "output directory '{}' exists and is not tokenized data (no {}); refusing to replace it", dir_,
                 kTokenManifestName);
  }
  const fs::path parent = final_dir.has_parent_path() ? final_dir.parent_path() : fs::path(".");
  fs::create_directories(parent);
  dir_ = final_dir.string();
  staging_ = (parent / fmt::format(".{}.tmp-{}", final_dir.filename().string(), ::getpid())).string();
  fs::remove_all(staging_);
  fs::create_directory(staging_);
  manifest_.tokenizer = std::move(tokenizer);
  for (SourceInfo& s : sources) s.documents = s.tokens = s.skipped = 0;
  manifest_.sources = std::move(sources);
}

TokenDatasetWriter::~TokenDatasetWriter() {
  if (finished_) return;
  shard_.reset();           // removes its temporary first
  std::error_code ignored;  // best effort: an error may be unwinding already
  fs::remove_all(staging_, ignored);
}

void TokenDatasetWriter::add(std::span<const int32_t> tokens, std::span<const uint8_t> loss_mask, int32_t source) {
  PRIMER_CHECK(!finished_, "tokenized data '{}': add() after finish()", dir_);
  PRIMER_CHECK(source >= 0 && source < int32_t(manifest_.sources.size()), "tokenized data '{}': source {} of {}", dir_,
               source, manifest_.sources.size());
  if (!shard_) {
    const std::string name = fmt::format("shard-{:05d}.h5", manifest_.shards.size());
    shard_ = std::make_unique<TokenShardWriter>((fs::path(staging_) / name).string(), manifest_.tokenizer);
  }
  shard_->add(tokens, loss_mask, source);
  SourceInfo& info = manifest_.sources[size_t(source)];
  info.documents += 1;
  info.tokens += int64_t(tokens.size());
  if (shard_->tokens() >= shard_tokens_) commit_shard();
}

void TokenDatasetWriter::count_skipped(int32_t source, int64_t records) {
  manifest_.sources.at(size_t(source)).skipped += records;
}

void TokenDatasetWriter::commit_shard() {
  const ShardInfo info = shard_->commit();
  bytes_written_ += int64_t(info.bytes);
  manifest_.shards.push_back(info);
  shard_.reset();
}

TokenManifest TokenDatasetWriter::finish() {
  PRIMER_CHECK(!finished_, "tokenized data '{}' finished twice", dir_);
  if (shard_) commit_shard();
  io::write_file_synced((fs::path(staging_) / kTokenManifestName).string(), manifest_.to_json());
  io::sync_directory(staging_);
  // The commit point: before this rename the output directory is the old one (or absent), after it the new one.
  const bool replaced = io::rename_directory_atomically(staging_, dir_);
  finished_ = true;
  io::sync_directory(fs::path(dir_).parent_path().empty() ? "." : fs::path(dir_).parent_path().string());
  if (replaced) fs::remove_all(staging_);  // the swap left the previous output here
  return manifest_;
}

// ---- reading ----

TokenShard TokenShard::open(const std::string& path, const ShardInfo& expected, const TokenizerIdentity& tokenizer,
                            int64_t sources, bool verify) {
  std::error_code ec;
  const uint64_t bytes = fs::file_size(path, ec);
  PRIMER_CHECK(!ec, "token shard '{}' listed in the manifest cannot be read: {}", path, ec.message());
  PRIMER_CHECK(bytes == expected.bytes,
               "token shard '{}' has {} bytes, the manifest records {} (truncated or replaced?)", path, bytes,
               expected.bytes);
  TokenShard s;
  s.path_ = path;
  s.file_ = io::MappedFile(path);
  if (verify) {
    const uint32_t crc = io::crc32c_update(0, s.file_.data(), s.file_.size());
    PRIMER_CHECK(crc == expected.crc32c, "token shard '{}' is corrupted: CRC32C {:08x}, the manifest records {:08x}",
                 path, crc, expected.crc32c);
  }

  const io::Hdf5File h5 = io::Hdf5File::open_read_only(path);
  PRIMER_CHECK(h5.has_attribute("/", "format") && h5.string_attribute("/", "format") == kFormat,
               "'{}' is not a token shard (no format attribute \"{}\")", path, kFormat);
  expect_attribute(h5, "format_version", kTokenDataFormatVersion, "this build");
  expect_attribute(h5, "documents", expected.documents, "the manifest");
  expect_attribute(h5, "tokens", expected.tokens, "the manifest");
  expect_attribute(h5, "tokenizer_crc32c", tokenizer.crc32c, "the manifest's tokenizer");
  expect_attribute(h5, "vocab_size", tokenizer.vocab_size, "the manifest's tokenizer");
  const int64_t n = expected.tokens, d = expected.documents;
  for (const auto& [name, length] : {std::pair<const char*, int64_t>{"/tokens", n},
                                     {"/doc_offsets", d + 1},
                                     {"/loss_mask", n},
                                     {"/source_ids", d}}) {
    PRIMER_CHECK(h5.contains(name), "token shard '{}' has no dataset '{}'", path, name);
    const Shape shape = h5.shape_of(name);
    PRIMER_CHECK(shape == Shape{length}, "token shard '{}': dataset '{}' has shape {}, expected [{}]", path, name,
                 shape_str(shape), length);
  }
  s.mapped_ = true;
  s.tokens_ = dataset_view(h5, s.file_, "/tokens", n, s.tokens_copy_, s.mapped_);
  s.doc_offsets_ = dataset_view(h5, s.file_, "/doc_offsets", d + 1, s.offsets_copy_, s.mapped_);
  s.loss_mask_ = dataset_view(h5, s.file_, "/loss_mask", n, s.mask_copy_, s.mapped_);
  s.source_ids_ = dataset_view(h5, s.file_, "/source_ids", d, s.sources_copy_, s.mapped_);

  // Offsets and source ids are what every later read indexes with, so they are always checked (per document).
  PRIMER_CHECK(s.doc_offsets_[0] == 0 && s.doc_offsets_[size_t(d)] == n,
               "token shard '{}': dataset '/doc_offsets' runs from {} to {}, expected 0 to {} (the token count)", path,
               s.doc_offsets_[0], s.doc_offsets_[size_t(d)], n);
  for (int64_t i = 0; i < d; ++i)
    PRIMER_CHECK(s.doc_offsets_[size_t(i)] < s.doc_offsets_[size_t(i + 1)],
                 "token shard '{}': dataset '/doc_offsets' is not increasing at document {} ({} then {})", path, i,
                 s.doc_offsets_[size_t(i)], s.doc_offsets_[size_t(i + 1)]);
  for (int64_t i = 0; i < d; ++i)
    PRIMER_CHECK(s.source_ids_[size_t(i)] >= 0 && s.source_ids_[size_t(i)] < sources,
                 "token shard '{}': dataset '/source_ids' holds {} for document {}, the manifest has {} sources", path,
                 s.source_ids_[size_t(i)], i, sources);
  if (verify) {  // a pass over the tokens, like the checksum's
    for (int64_t i = 0; i < n; ++i)
      PRIMER_CHECK(s.tokens_[size_t(i)] >= 0 && s.tokens_[size_t(i)] < tokenizer.vocab_size,
                   "token shard '{}': dataset '/tokens' holds id {} at {}, outside the vocabulary of {}", path,
                   s.tokens_[size_t(i)], i, tokenizer.vocab_size);
    for (int64_t i = 0; i < n; ++i)
      PRIMER_CHECK(s.loss_mask_[size_t(i)] <= 1,
                   "token shard '{}': dataset '/loss_mask' holds {} at {}, expected 0 or 1", path,
                   int(s.loss_mask_[size_t(i)]), i);
  }
  return s;
}

DocumentView TokenShard::document(int64_t d) const {
  const size_t begin = size_t(doc_offsets_[size_t(d)]), end = size_t(doc_offsets_[size_t(d + 1)]);
  return {tokens_.subspan(begin, end - begin), loss_mask_.subspan(begin, end - begin), source_ids_[size_t(d)]};
}

}  // namespace primer::data
