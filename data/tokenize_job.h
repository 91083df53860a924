// `primer tokenize job.yaml`: text files, JSONL records and chat conversations → a tokenized-data directory
// (data/token_shards.h). Files are tokenized in parallel by a pool of threads, and the results are written in
// input order, so the output is the same whatever the thread timing. Malformed records are reported with
// file:line and what is wrong, then skipped or fatal (on_error). The directory appears atomically at the end.
#pragma once
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/io/json.h"
#include "data/token_manifest.h"
#include "core/config/config.h"

namespace primer::data {

// What the job needs from a tokenizer. encode and encode_chat are called from several threads at once.
class TextEncoder {
 public:
  virtual ~TextEncoder() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;  // special-token text stays plain text
  // A conversation (a JSON array of messages) in the model's chat format: ids and the loss mask (1 on
  // assistant tokens). Throws primer::Error naming what is malformed.
  virtual void encode_chat(const json::Value& messages, std::vector<int32_t>& ids,
                           std::vector<uint8_t>& mask) const = 0;
  virtual std::optional<int32_t> token_id(std::string_view token) const = 0;  // a vocabulary or added token
  virtual TokenizerIdentity identity() const = 0;
};

// The job file's keys and, for each entry of `sources`, the source keys (docs/data.md lists both).
const config::Schema& tokenize_schema();
const config::Schema& tokenize_source_schema();

struct TokenizeSummary {
  int64_t files = 0, input_bytes = 0;
  int64_t documents = 0, tokens = 0, skipped = 0;
  int64_t invalid_utf8 = 0;  // documents whose text is not valid UTF-8 (tokenized byte for byte, reported)
  int64_t shards = 0, output_bytes = 0;
  int workers = 0;
  double seconds = 0;
  double write_seconds = 0;  // of which the main thread spent writing shards (HDF5, fsync, rename)
  double cpu_seconds = 0;    // CPU time of the whole process meanwhile (all threads): MB per CPU-second
                             // is the throughput per core, whatever else the machine runs
};

// Runs a job loaded against tokenize_schema(). Progress goes to `progress` (nullptr: none); malformed
// records skipped under on_error: skip are listed there too.
TokenizeSummary run_tokenize_job(const config::Config& job, const TextEncoder& encoder, std::FILE* progress);

// `primer tokenize`: loads the job (with --set overrides) and its tokenizer, runs it with progress on stderr,
// prints the summary. Returns a process exit code.
int run_tokenize(const std::string& job_path, const std::vector<std::string>& overrides);

}  // namespace primer::data
