#include "data/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "core/check.h"
#include "core/io/json.h"
#include "data/bpe.h"
#include "data/pretokenizer.h"
#include "data/unicode.h"

namespace primer::data {

namespace {

// GPT-2's byte-level alphabet: printable bytes stand for themselves, the others for U+0100 onwards in byte order,
// so that every token of the vocabulary is a printable string.
std::array<char32_t, 256> byte_to_unicode() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    map[size_t(b)] = printable ? char32_t(b) : next++;
  }
  return map;
}

// The raw bytes a vocabulary token stands for, or nullopt if it has a character outside the byte-level alphabet.
std::optional<std::string> token_bytes(std::string_view token, const std::unordered_map<char32_t, uint8_t>& byte_of) {
  std::string bytes;
  const auto* s = reinterpret_cast<const unsigned char*>(token.data());
  for (size_t i = 0; i < token.size();) {
    const unicode::Unit u = unicode::decode(s + i, token.size() - i);
    const auto it = u.valid ? byte_of.find(u.cp) : byte_of.end();
    if (it == byte_of.end()) return std::nullopt;
    bytes.push_back(char(it->second));
    i += u.length;
  }
  return bytes;
}

// A token given as "<|im_end|>" or as {"content": "<|im_end|>", ...} (tokenizer_config.json allows both).
std::optional<std::string> token_text(const json::Node& config, std::string_view key) {
  const auto node = config.find(key);
  if (!node) return std::nullopt;
  if (node->type() == json::Type::Object) return node->at("content").as_string();
  return node->as_string();
}

struct AddedToken {
  std::string content;
  int32_t id;
  bool special, lstrip, rstrip;
};

// Leftmost-longest matching of the added tokens (a byte trie, as the reference's splitter does).
class AddedTokenMatcher {
 public:
  void add(std::string_view content, int32_t index) {
    int32_t node = 0;
    for (const char c : content) {
      auto& kids = nodes_[size_t(node)].children;
      const auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& k) { return k.first == c; });
      if (it != kids.end()) {
        node = it->second;
      } else {
        kids.emplace_back(c, int32_t(nodes_.size()));
        node = int32_t(nodes_.size());
        nodes_.emplace_back();
      }
    }
    nodes_[size_t(node)].token = index;
    const auto first = static_cast<unsigned char>(content[0]);
    if (!first_byte_[first]) single_first_byte_ = first_bytes_++ == 0 ? first : -1;
    first_byte_[first] = true;
  }
  // The first position from `pos` where a token may start (text.size() if none).
  size_t next_start(std::string_view text, size_t pos) const {
    if (single_first_byte_ >= 0) {  // typical: every added token starts with '<'
      const auto* hit =
          pos < text.size() ? std::memchr(text.data() + pos, single_first_byte_, text.size() - pos) : nullptr;
      return hit ? size_t(static_cast<const char*>(hit) - text.data()) : text.size();
    }
    while (pos < text.size() && !first_byte_[static_cast<unsigned char>(text[pos])]) ++pos;
    return pos;
  }
  // The longest token accepted by `allowed` that starts at `pos`: {index, length}, or index -1.
  template <class Allowed>
  std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos, const Allowed& allowed) const {
    std::pair<int32_t, size_t> best{-1, 0};
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      const auto& kids = nodes_[size_t(node)].children;
      const auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& k) { return k.first == text[i]; });
      if (it == kids.end()) break;
      node = it->second;
      const int32_t token = nodes_[size_t(node)].token;
      if (token >= 0 && allowed(token)) best = {token, i + 1 - pos};
    }
    return best;
  }

 private:
  struct Node {
    std::vector<std::pair<char, int32_t>> children;
    int32_t token = -1;
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
  std::array<bool, 256> first_byte_{};
  int first_bytes_ = 0, single_first_byte_ = -1;  // how many distinct first bytes; the byte if only one
};

bool is_space_at(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unicode::Unit u = unicode::decode(p + pos, s.size() - pos);
  return u.valid && unicode::char_class(u.cp) == unicode::CharClass::Space;
}

// Whitespace trimming for added tokens with lstrip/rstrip.
std::string_view trim_end(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
    if (!is_space_at(s, start)) break;
    end = start;
  }
  return s.substr(0, end);
}

std::string_view trim_start(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size() && is_space_at(s, pos))
    pos += unicode::decode(reinterpret_cast<const unsigned char*>(s.data()) + pos, s.size() - pos).length;
  return s.substr(pos);
}

}  // namespace

struct Tokenizer::Impl {
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Pretokenizer> pretokenizer;
  bool nfc = false;
  std::vector<AddedToken> added;
  AddedTokenMatcher matcher;
  // What each id decodes to: bytes [offsets[id], offsets[id + 1]) of `decoded`; empty for ids no token has.
  std::string decoded;
  std::vector<uint32_t> offsets;
  std::unordered_map<std::string, int32_t> added_by_content;
  std::unordered_map<char32_t, uint8_t> byte_of_char;
  std::optional<std::string> eos_token, bos_token;
  std::string chat_template;
  std::string source;

  void encode_plain(std::string_view text, std::vector<int32_t>& ids) const;
};

namespace {

void load_normalizer(const json::Node& root, bool& nfc) {
  const auto node = root.find("normalizer");
  if (!node) return;
  const std::string type = node->at("type").as_string();
  if (type == "NFC") {
    nfc = true;
    return;
  }
  if (type == "Sequence") {
    const auto list = node->at("normalizers");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string t = list.at(i).at("type").as_string();
      if (t != "NFC") list.at(i).at("type").fail(fmt::format("unsupported normalizer \"{}\" (primer supports NFC)", t));
      nfc = true;
    }
    return;
  }
  node->at("type").fail(fmt::format("unsupported normalizer \"{}\" (primer supports NFC)", type));
}

// Sequence [Split (a known regex, Isolated), ByteLevel without its own regex]: Qwen2/Qwen3 and Llama-3.
SplitPattern load_pre_tokenizer(const json::Node& root) {
  const json::Node pre = root.at("pre_tokenizer");
  const std::string type = pre.at("type").as_string();
  if (type != "Sequence")
    pre.at("type").fail(
        fmt::format("unsupported pre_tokenizer \"{}\" (primer supports a Sequence of a Split by the "
                    "Qwen2 or Llama-3 regex and a ByteLevel)",
                    type));
  const json::Node list = pre.at("pretokenizers");
  if (list.size() != 2) list.fail(fmt::format("expected 2 pre-tokenizers (Split, ByteLevel), got {}", list.size()));
  const json::Node split = list.at(0), byte_level = list.at(1);
  if (split.at("type").as_string() != "Split") split.at("type").fail("expected \"Split\"");
  const json::Node regex = split.at("pattern").at("Regex");
  const auto pattern = recognize_split_pattern(regex.as_string());
  if (!pattern) regex.fail("unsupported pre-tokenizer regex (primer knows the Qwen2 and Llama-3 patterns)");
  if (split.at("behavior").as_string() != "Isolated") split.at("behavior").fail("expected \"Isolated\"");
  if (split.bool_or("invert", false)) split.at("invert").fail("expected false");
  if (byte_level.at("type").as_string() != "ByteLevel") byte_level.at("type").fail("expected \"ByteLevel\"");
  if (byte_level.bool_or("add_prefix_space", false)) byte_level.at("add_prefix_space").fail("expected false");
  if (byte_level.bool_or("use_regex", true)) byte_level.at("use_regex").fail("expected false (the Split does it)");
  return *pattern;
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path json_path = fs::path(path).extension() == ".json" ? fs::path(path) : fs::path(path) / "tokenizer.json";
  PRIMER_CHECK(fs::exists(json_path), "tokenizer: '{}' does not exist (expected a tokenizer.json or its directory)",
               json_path.string());
  auto impl = std::make_unique<Impl>();
  impl->source = json_path.string();
  const json::Value doc = json::parse_file(json_path.string());
  const json::Node root(doc, json_path.string());

  load_normalizer(root, impl->nfc);
  impl->pretokenizer = std::make_unique<Pretokenizer>(load_pre_tokenizer(root));
  if (const auto decoder = root.find("decoder"); decoder && decoder->at("type").as_string() != "ByteLevel")
    decoder->at("type").fail("unsupported decoder (primer decodes byte-level BPE: expected \"ByteLevel\")");

  const json::Node model = root.at("model");
  if (model.at("type").as_string() != "BPE") model.at("type").fail("expected \"BPE\"");
  if (model.bool_or("byte_fallback", false)) model.at("byte_fallback").fail("expected false (byte-level BPE)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!model.string_or(key, "").empty()) model.at(key).fail("expected none (byte-level BPE)");
  if (const auto dropout = model.find("dropout"); dropout && dropout->as_double() != 0.0)
    dropout->fail("expected none: BPE dropout is for training a tokenizer, not for preparing data");

  const auto unicode_of = byte_to_unicode();
  for (int b = 0; b < 256; ++b) impl->byte_of_char[unicode_of[size_t(b)]] = uint8_t(b);

  // Vocabulary: token string → raw bytes.
  const json::Node vocab = model.at("vocab");
  std::unordered_map<std::string, int32_t> vocab_by_string;
  BpeModel::Vocab vocab_by_bytes;
  vocab_by_string.reserve(vocab.as_object().size());
  vocab_by_bytes.reserve(vocab.as_object().size());
  int64_t max_id = -1;
  for (const auto& [token, value] : vocab.as_object()) {
    const int64_t id = value.is_int() ? value.as_int() : -1;
    if (id < 0 || id > INT32_MAX) vocab.at(token).fail("expected a token id (an integer from 0 to 2^31 - 1)");
    auto bytes = token_bytes(token, impl->byte_of_char);
    if (!bytes)
      vocab.at(token).fail("token has characters outside the byte-level alphabet (not a byte-level BPE vocabulary)");
    vocab_by_string.emplace(token, int32_t(id));
    vocab_by_bytes.emplace(std::move(*bytes), int32_t(id));
    max_id = std::max(max_id, id);
  }
  std::array<int32_t, 256> byte_ids{};
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_by_bytes.find(std::string(1, char(b)));
    if (it == vocab_by_bytes.end()) vocab.fail(fmt::format("no token for the byte 0x{:02x}", b));
    byte_ids[size_t(b)] = it->second;
  }

  // Merges, in rank order: "left right" (tokenizers < 0.20) or ["left", "right"].
  const json::Node merges = model.at("merges");
  std::vector<BpeModel::Merge> merge_ids;
  merge_ids.reserve(merges.size());
  const auto& merge_values = merges.value().as_array();
  for (size_t i = 0; i < merge_values.size(); ++i) {
    const json::Value& m = merge_values[i];
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.as_string();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        merges.at(i).fail("expected \"left right\" (two tokens separated by one space)");
      left = s.substr(0, space), right = s.substr(space + 1);
    } else {
      const json::Node pair = merges.at(i);
      if (pair.size() != 2) pair.fail("expected a pair of tokens");
      left = pair.at(0).as_string(), right = pair.at(1).as_string();
    }
    const auto l = vocab_by_string.find(left), r = vocab_by_string.find(right), lr = vocab_by_string.find(left + right);
    if (l == vocab_by_string.end() || r == vocab_by_string.end() || lr == vocab_by_string.end())
      merges.at(i).fail(fmt::format("\"{}\" + \"{}\": {} is not in model.vocab", left, right,
                                    l == vocab_by_string.end()   ? "the left token"
                                    : r == vocab_by_string.end() ? "the right token"
                                                                 : "the merged token"));
    merge_ids.push_back({l->second, r->second, lr->second});
  }
  std::vector<std::string> bytes_of_id(size_t(max_id + 1));
  for (const auto& [bytes, id] : vocab_by_bytes) bytes_of_id[size_t(id)] = bytes;
  impl->model =
      std::make_unique<BpeModel>(std::move(vocab_by_bytes), byte_ids, merge_ids, model.bool_or("ignore_merges", false));

  // Added tokens: matched in the raw text before anything else.
  if (const auto added = root.find("added_tokens")) {
    for (size_t i = 0; i < added->size(); ++i) {
      const json::Node t = added->at(i);
      AddedToken token{t.at("content").as_string(), int32_t(t.at("id").as_int()), t.bool_or("special", false),
                       t.bool_or("lstrip", false), t.bool_or("rstrip", false)};
      if (token.content.empty()) t.at("content").fail("expected a non-empty token");
      if (token.id < 0) t.at("id").fail("expected a non-negative id");
      if (t.bool_or("single_word", false))
        t.at("single_word").fail("unsupported (primer matches added tokens anywhere)");
      max_id = std::max<int64_t>(max_id, token.id);
      impl->added_by_content[token.content] = token.id;
      impl->matcher.add(token.content, int32_t(impl->added.size()));
      impl->added.push_back(std::move(token));
    }
  }

  // What each id decodes to (added tokens may extend the id range, or take over a vocabulary id).
  bytes_of_id.resize(size_t(max_id + 1));
  for (const auto& t : impl->added) bytes_of_id[size_t(t.id)] = t.content;
  impl->offsets.reserve(bytes_of_id.size() + 1);
  for (const auto& bytes : bytes_of_id) {
    impl->offsets.push_back(uint32_t(impl->decoded.size()));
    impl->decoded += bytes;
  }
  impl->offsets.push_back(uint32_t(impl->decoded.size()));

  // tokenizer_config.json beside it: eos/bos tokens and the chat template.
  const fs::path config_path = json_path.parent_path() / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const json::Value config_doc = json::parse_file(config_path.string());
    const json::Node config(config_doc, config_path.string());
    impl->eos_token = token_text(config, "eos_token");
    impl->bos_token = token_text(config, "bos_token");
    impl->chat_template = config.string_or("chat_template", "");
    for (const auto& [key, token] : {std::pair{"eos_token", impl->eos_token}, std::pair{"bos_token", impl->bos_token}})
      if (token && !impl->added_by_content.count(*token) && !vocab_by_string.count(*token))
        config.at(key).fail(fmt::format("token \"{}\" is not in {}", *token, json_path.string()));
  }
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  std::string normalized;
  if (nfc && unicode::nfc(text, normalized)) text = normalized;
  // Pieces go to the model in batches (it prefetches their cache entries).
  std::array<size_t, 256> ends;
  for (size_t done = 0; done < text.size();) {
    const size_t count = pretokenizer->split(text, done, ends);
    for (size_t k = 0; k < count; ++k) ends[k] -= done;
    model->encode_pieces(text.substr(done, ends[count - 1]), std::span<const size_t>(ends.data(), count), ids);
    done += ends[count - 1];
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  const auto allowed = [&](int32_t index) { return allow_special || !impl_->added[size_t(index)].special; };
  size_t section = 0;       // start of the text not yet encoded
  bool strip_next = false;  // the previous added token strips whitespace on its right
  for (size_t pos = impl_->matcher.next_start(text, 0); pos < text.size();
       pos = impl_->matcher.next_start(text, pos + 1)) {
    const auto [index, length] = impl_->matcher.longest_at(text, pos, allowed);
    if (index < 0) continue;
    const AddedToken& token = impl_->added[size_t(index)];
    std::string_view before = text.substr(section, pos - section);
    if (strip_next) before = trim_start(before);
    if (token.lstrip) before = trim_end(before);
    impl_->encode_plain(before, ids);
    ids.push_back(token.id);
    strip_next = token.rstrip;
    section = pos + length;
    pos = section - 1;
  }
  std::string_view rest = text.substr(section);
  if (strip_next) rest = trim_start(rest);
  impl_->encode_plain(rest, ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (const int32_t id : ids) {
    const auto& offsets = impl_->offsets;
    PRIMER_CHECK(id >= 0 && size_t(id) + 1 < offsets.size() && offsets[size_t(id)] < offsets[size_t(id) + 1],
                 "Tokenizer::decode: id {} is not a token of {} (vocabulary size {})", id, impl_->source,
                 offsets.size() - 1);
    bytes.append(impl_->decoded, offsets[size_t(id)], offsets[size_t(id) + 1] - offsets[size_t(id)]);
  }
  return unicode::is_valid_utf8(bytes) ? bytes : unicode::to_valid_utf8(bytes);
}

int64_t Tokenizer::vocab_size() const { return int64_t(impl_->offsets.size() - 1); }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (const auto it = impl_->added_by_content.find(std::string(token)); it != impl_->added_by_content.end())
    return it->second;
  const auto bytes = token_bytes(token, impl_->byte_of_char);
  if (!bytes) return std::nullopt;
  return impl_->model->find(*bytes);
}

int32_t Tokenizer::eos_id() const {
  if (impl_->eos_token) return *token_id(*impl_->eos_token);
  for (const char* fallback : {"<|endoftext|>", "<|end_of_text|>", "</s>"})
    if (const auto id = token_id(fallback)) return *id;
  PRIMER_FAIL(
      "{}: no end-of-sequence token (no eos_token in tokenizer_config.json, and none of <|endoftext|>, "
      "<|end_of_text|>, </s>)",
      impl_->source);
}

std::optional<int32_t> Tokenizer::bos_id() const {
  if (!impl_->bos_token) return std::nullopt;
  return token_id(*impl_->bos_token);
}

const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

}  // namespace primer::data
