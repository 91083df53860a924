// The tokenize job's encoder over a Hugging Face byte-level BPE tokenizer (data/tokenizer.h) with Qwen3's chat
// format (data/chat_format.h) for conversations.
#pragma once
#include <string>

#include "data/tokenize_job.h"
#include "data/tokenizer.h"

namespace primer::data {

class TokenizerEncoder : public TextEncoder {
 public:
  // `path`: a tokenizer directory or its tokenizer.json. The identity's CRC32C is that of tokenizer.json.
  explicit TokenizerEncoder(const std::string& path);

  // Documents are text: special-token strings inside them stay plain text (a stray "<|endoftext|>" in a web
  // page must not become a document boundary).
  std::vector<int32_t> encode(std::string_view text) const override;
  // Messages are objects with string "role" and "content" and an optional "reasoning_content".
  void encode_chat(const json::Value& messages, std::vector<int32_t>& ids, std::vector<uint8_t>& mask) const override;
  std::optional<int32_t> token_id(std::string_view token) const override { return tokenizer_.token_id(token); }
  TokenizerIdentity identity() const override { return identity_; }

 private:
  Tokenizer tokenizer_;
  TokenizerIdentity identity_;
};

}  // namespace primer::data
