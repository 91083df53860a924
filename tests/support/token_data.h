// Synthetic tokenized-data directories for the data-pipeline tests.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/token_manifest.h"

namespace primer::test {

struct SyntheticDoc {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;  // empty: all ones
  int32_t source = 0;
};

// A made-up tokenizer identity: vocabulary `vocab`, EOS its last id.
data::TokenizerIdentity synthetic_tokenizer(int64_t vocab = int64_t(1) << 24);

// Writes `docs` (sources named s0, s1, ...) into `dir` with shards of about `shard_tokens` tokens.
data::TokenManifest write_token_data(const std::string& dir, const std::vector<SyntheticDoc>& docs, int sources,
                                     int64_t shard_tokens,
                                     const data::TokenizerIdentity& tokenizer = synthetic_tokenizer());

}  // namespace primer::test
