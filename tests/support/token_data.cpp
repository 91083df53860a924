#include "tests/support/token_data.h"

#include "data/token_shards.h"

namespace primer::test {

data::TokenizerIdentity synthetic_tokenizer(int64_t vocab) {
  return {"synthetic", 0x5eed1234u, vocab, int32_t(vocab - 1)};
}

data::TokenManifest write_token_data(const std::string& dir, const std::vector<SyntheticDoc>& docs, int sources,
                                     int64_t shard_tokens, const data::TokenizerIdentity& tokenizer) {
  std::vector<data::SourceInfo> infos;
  for (int s = 0; s < sources; ++s) infos.push_back({"s" + std::to_string(s), "text", 1});
  data::TokenDatasetWriter writer(dir, tokenizer, infos, shard_tokens);
  for (const SyntheticDoc& d : docs) writer.add(d.tokens, d.mask, d.source);
  return writer.finish();
}

}  // namespace primer::test
