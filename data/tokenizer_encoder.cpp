#include "data/tokenizer_encoder.h"

#include <filesystem>

#include "core/check.h"
#include "core/io/crc32c.h"
#include "core/io/mapped_file.h"
#include "data/chat_format.h"

namespace primer::data {

TokenizerEncoder::TokenizerEncoder(const std::string& path) : tokenizer_(Tokenizer::load(path)) {
  const std::string json_path =
      std::filesystem::is_directory(path) ? (std::filesystem::path(path) / "tokenizer.json").string() : path;
  const io::MappedFile definition(json_path);
  identity_.name = path;
  identity_.crc32c = io::crc32c_update(0, definition.data(), definition.size());
  identity_.vocab_size = tokenizer_.vocab_size();
  identity_.eos_id = tokenizer_.eos_id();
}

std::vector<int32_t> TokenizerEncoder::encode(std::string_view text) const {
  return tokenizer_.encode(text, /*allow_special=*/false);
}

void TokenizerEncoder::encode_chat(const json::Value& messages, std::vector<int32_t>& ids,
                                   std::vector<uint8_t>& mask) const {
  std::vector<ChatMessage> chat;
  const json::Array& list = messages.as_array();
  for (size_t i = 0; i < list.size(); ++i) {
    PRIMER_CHECK(list[i].is_object(), "message {} is {}, expected an object with role and content", i,
                 json::type_name(list[i].type()));
    const json::Object& m = list[i].as_object();
    auto text = [&](const char* key, bool required) -> std::optional<std::string> {
      const json::Value* v = m.find(key);
      if (!v || v->is_null()) {
        PRIMER_CHECK(!required, "message {} has no \"{}\"", i, key);
        return std::nullopt;
      }
      PRIMER_CHECK(v->is_string(), "message {}: \"{}\" is {}, expected a string", i, key, json::type_name(v->type()));
      return v->as_string();
    };
    chat.push_back({*text("role", true), *text("content", true), text("reasoning_content", false)});
  }
  ChatTokens tokens = tokenize_chat(tokenizer_, chat);
  ids = std::move(tokens.ids);
  mask = std::move(tokens.loss_mask);
}

}  // namespace primer::data
