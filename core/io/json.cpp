#include "core/io/json.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/check.h"
#include "core/io/mapped_file.h"

namespace primer::json {

const char* type_name(Type t) {
  switch (t) {
    case Type::Null: return "null";
    case Type::Bool: return "bool";
    case Type::Int: return "integer";
    case Type::Double: return "number";
    case Type::String: return "string";
    case Type::Array: return "array";
    case Type::Object: return "object";
  }
  return "?";
}

// ---- Object -------------------------------------------------------------------------------------------

std::optional<size_t> Object::position(std::string_view key) const {
  if (!index_.empty()) {
    const auto it = index_.find(std::string(key));
    if (it == index_.end()) return std::nullopt;
    return it->second;
  }
  for (size_t i = 0; i < items_.size(); ++i)
    if (items_[i].first == key) return i;
  return std::nullopt;
}

const Value* Object::find(std::string_view key) const {
  const auto pos = position(key);
  return pos ? &items_[*pos].second : nullptr;
}

Value* Object::find(std::string_view key) {
  const auto pos = position(key);
  return pos ? &items_[*pos].second : nullptr;
}

bool Object::insert_new(std::string key, Value&& value) {
  if (position(key)) return false;
  if (!index_.empty()) index_.emplace(key, items_.size());
  items_.emplace_back(std::move(key), std::move(value));
  if (index_.empty() && items_.size() >= kIndexFrom) rebuild_index();
  return true;
}

Value& Object::set(std::string key, Value value) {
  if (Value* existing = find(key)) return *existing = std::move(value);
  insert_new(std::move(key), std::move(value));
  return items_.back().second;
}

bool Object::erase(std::string_view key) {
  const auto pos = position(key);
  if (!pos) return false;
  items_.erase(items_.begin() + std::ptrdiff_t(*pos));
  rebuild_index();  // positions after the erased item moved
  return true;
}

void Object::rebuild_index() {
  index_.clear();
  if (items_.size() < kIndexFrom) return;
  index_.reserve(items_.size());
  for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
}

bool operator==(const Object& a, const Object& b) {
  if (a.size() != b.size()) return false;
  auto ib = b.begin();
  for (const auto& [key, value] : a) {
    if (key != ib->first || !(value == ib->second)) return false;
    ++ib;
  }
  return true;
}

// ---- Value --------------------------------------------------------------------------------------------

namespace {

[[noreturn]] void value_mismatch(const char* expected, Type got) {
  PRIMER_FAIL("JSON value: expected {}, got {}", expected, type_name(got));
}

// An integer if the double holds one exactly and it fits in int64.
std::optional<int64_t> exact_integer(double d) {
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) || std::trunc(d) != d) return std::nullopt;
  return int64_t(d);
}

}  // namespace

bool Value::as_bool() const {
  if (!is_bool()) value_mismatch("a boolean", type());
  return std::get<bool>(data_);
}

int64_t Value::as_int() const {
  if (is_int()) return std::get<int64_t>(data_);
  if (type() == Type::Double)
    if (const auto i = exact_integer(std::get<double>(data_))) return *i;
  value_mismatch("an integer", type());
}

double Value::as_double() const {
  if (is_int()) return double(std::get<int64_t>(data_));
  if (type() != Type::Double) value_mismatch("a number", type());
  return std::get<double>(data_);
}

const std::string& Value::as_string() const {
  if (!is_string()) value_mismatch("a string", type());
  return std::get<std::string>(data_);
}

const Array& Value::as_array() const {
  if (!is_array()) value_mismatch("an array", type());
  return std::get<Array>(data_);
}

Array& Value::as_array() {
  if (!is_array()) value_mismatch("an array", type());
  return std::get<Array>(data_);
}

const Object& Value::as_object() const {
  if (!is_object()) value_mismatch("an object", type());
  return std::get<Object>(data_);
}

Object& Value::as_object() {
  if (!is_object()) value_mismatch("an object", type());
  return std::get<Object>(data_);
}

Value& Value::operator[](std::string_view key) {
  if (is_null()) data_ = Object();
  Object& object = as_object();
  if (Value* existing = object.find(key)) return *existing;
  return object.set(std::string(key), Value());
}

// ---- parse --------------------------------------------------------------------------------------------

namespace {

constexpr int kMaxDepth = 512;  // deeper documents are rejected instead of overflowing the stack

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& source, int64_t first_line)
      : begin_(text.data()),
        p_(text.data()),
        end_(text.data() + text.size()),
        source_(source),
        first_line_(first_line) {}

  Value document() {
    skip_ws();
    Value v = value(0);
    skip_ws();
    if (p_ != end_) fail("expected the end of the document after the top-level value");
    return v;
  }

 private:
  const char* begin_;
  const char* p_;
  const char* end_;
  const std::string& source_;
  int64_t first_line_;

  [[noreturn]] void fail_at(const char* at, const std::string& what) const {
    int64_t line = first_line_;
    const char* line_start = begin_;
    for (const char* c = begin_; c < at; ++c)
      if (*c == '\n') ++line, line_start = c + 1;
    PRIMER_FAIL("{}:{}:{}: {}", source_, line, at - line_start + 1, what);
  }

  // "<what>, got 'x'" at the current position.
  [[noreturn]] void fail(const std::string& what) const {
    if (p_ == end_) fail_at(p_, what + ", got the end of the input");
    const unsigned char c = static_cast<unsigned char>(*p_);
    if (c < 0x20 || c >= 0x7f) fail_at(p_, fmt::format("{}, got byte 0x{:02x}", what, c));
    fail_at(p_, fmt::format("{}, got '{}'", what, char(c)));
  }

  void skip_ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\t' || *p_ == '\r')) ++p_;
  }

  void expect(char c, const char* what) {
    if (p_ == end_ || *p_ != c) fail(what);
    ++p_;
  }

  Value value(int depth) {
    if (p_ == end_) fail("expected a value");
    switch (*p_) {
      case '{': return object(depth + 1);
      case '[': return array(depth + 1);
      case '"': return string();
      case 't': literal("true"); return true;
      case 'f': literal("false"); return false;
      case 'n': literal("null"); return nullptr;
      default:
        if (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')) return number();
        fail("expected a value (object, array, string, number, true, false or null)");
    }
  }

  void literal(std::string_view word) {
    if (size_t(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word)
      fail(fmt::format("expected '{}'", word));
    p_ += word.size();
  }

  void check_depth(int depth) const {
    if (depth > kMaxDepth) fail_at(p_, fmt::format("nesting deeper than {} levels", kMaxDepth));
  }

  Value object(int depth) {
    check_depth(depth);
    ++p_;  // '{'
    Object obj;
    skip_ws();
    if (p_ != end_ && *p_ == '}') return ++p_, Value(std::move(obj));
    while (true) {
      if (p_ == end_ || *p_ != '"') fail("expected a string key");
      const char* key_at = p_;
      std::string key = string_text();
      skip_ws();
      expect(':', "expected ':' after an object key");
      skip_ws();
      Value member = value(depth);
      if (!obj.insert_new(std::move(key), std::move(member)))
        fail_at(key_at, fmt::format("duplicate key {}", dump(Value(std::string(string_at(key_at))))));
      skip_ws();
      if (p_ != end_ && *p_ == ',') {
        ++p_;
        skip_ws();
        continue;
      }
      expect('}', "expected ',' or '}' after an object member");
      return Value(std::move(obj));
    }
  }

  // Re-reads the key that starts at `at` (only used to report a duplicate).
  std::string string_at(const char* at) {
    const char* saved = p_;
    p_ = at;
    std::string s = string_text();
    p_ = saved;
    return s;
  }

  Value array(int depth) {
    check_depth(depth);
    ++p_;  // '['
    Array arr;
    skip_ws();
    if (p_ != end_ && *p_ == ']') return ++p_, Value(std::move(arr));
    while (true) {
      arr.push_back(value(depth));
      skip_ws();
      if (p_ != end_ && *p_ == ',') {
        ++p_;
        skip_ws();
        continue;
      }
      expect(']', "expected ',' or ']' after an array element");
      return Value(std::move(arr));
    }
  }

  Value string() { return Value(string_text()); }

  std::string string_text() {
    const char* open = p_;
    ++p_;  // '"'
    std::string out;
    while (true) {
      const char* run = p_;  // plain ASCII runs are copied in one go
      while (p_ != end_ && *p_ != '"' && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20 &&
             static_cast<unsigned char>(*p_) < 0x80)
        ++p_;
      out.append(run, size_t(p_ - run));
      if (p_ == end_) fail_at(open, "unterminated string (no closing '\"')");
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return out;
      }
      if (c == '\\') {
        escape(out);
      } else if (c < 0x20) {
        fail("expected a string character (control characters must be escaped)");
      } else {
        utf8_sequence(out);
      }
    }
  }

  void escape(std::string& out) {
    const char* at = p_;
    ++p_;  // '\'
    if (p_ == end_) fail("expected an escape character after '\\'");
    const char e = *p_++;
    switch (e) {
      case '"': out += '"'; return;
      case '\\': out += '\\'; return;
      case '/': out += '/'; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'n': out += '\n'; return;
      case 'r': out += '\r'; return;
      case 't': out += '\t'; return;
      case 'u': break;
      default: p_ = at + 1; fail("expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX");
    }
    uint32_t cp = hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at(at, fmt::format("unpaired low surrogate \\u{:04X}", cp));
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
        fail_at(at, fmt::format("high surrogate \\u{:04X} not followed by a \\uDC00-\\uDFFF low surrogate", cp));
      p_ += 2;
      const uint32_t low = hex4();
      if (low < 0xDC00 || low > 0xDFFF)
        fail_at(at, fmt::format("high surrogate \\u{:04X} followed by \\u{:04X}, expected a low surrogate "
                                "\\uDC00-\\uDFFF",
                                cp, low));
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, cp);
  }

  uint32_t hex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i, ++p_) {
      if (p_ == end_) fail("expected 4 hex digits after \\u");
      const char c = *p_;
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("expected 4 hex digits after \\u");
      v = v * 16 + uint32_t(d);
    }
    return v;
  }

  // Copies one multi-byte UTF-8 character after checking it is well formed (RFC 3629: no overlongs, no
  // surrogates, nothing above U+10FFFF).
  void utf8_sequence(std::string& out) {
    const auto* s = reinterpret_cast<const unsigned char*>(p_);
    const unsigned char c = s[0];
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
      len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
      len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
      fail("expected valid UTF-8 in a string");
    if (end_ - p_ < len || s[1] < lo || s[1] > hi) fail("expected valid UTF-8 in a string");
    for (int i = 2; i < len; ++i)
      if (s[i] < 0x80 || s[i] > 0xBF) fail("expected valid UTF-8 in a string");
    out.append(p_, size_t(len));
    p_ += len;
  }

  Value number() {
    const char* start = p_;
    auto digits = [&] {
      const char* d = p_;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      return p_ - d;
    };
    if (*p_ == '-') ++p_;
    if (p_ != end_ && *p_ == '0') {
      ++p_;
      if (p_ != end_ && *p_ >= '0' && *p_ <= '9') fail("expected '.', 'e' or the end of a number after a leading 0");
    } else if (digits() == 0) {
      fail("expected a digit");
    }
    bool integral = true;
    if (p_ != end_ && *p_ == '.') {
      ++p_;
      integral = false;
      if (digits() == 0) fail("expected a digit after '.'");
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      integral = false;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (digits() == 0) fail("expected a digit in the exponent");
    }
    if (integral) {
      int64_t i = 0;
      const auto r = std::from_chars(start, p_, i);
      if (r.ec == std::errc() && r.ptr == p_) return i;
    }  // integers beyond int64 fall through to double, as in Python's float()
    double d = 0;
    const auto r = std::from_chars(start, p_, d);
    if (r.ec == std::errc::result_out_of_range) {
      const std::string copy(start, p_);  // strtod gives 0 on underflow and inf on overflow
      d = std::strtod(copy.c_str(), nullptr);
      if (std::isinf(d)) fail_at(start, fmt::format("number {} is out of the range of a double", copy));
    } else if (r.ec != std::errc() || r.ptr != p_) {
      fail_at(start, "expected a number");
    }
    return d;
  }
};

}  // namespace

Value parse(std::string_view text, const std::string& source_name, int64_t first_line) {
  return Parser(text, source_name, first_line).document();
}

Value parse_file(const std::string& path) {
  const io::MappedFile file(path);
  return parse(file.text(), path);
}

// ---- dump ---------------------------------------------------------------------------------------------

namespace {

void dump_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20)
          out += fmt::format("\\u{:04x}", c);
        else
          out += ch;
    }
  }
  out += '"';
}

void dump_double(std::string& out, double d) {
  PRIMER_CHECK(std::isfinite(d), "json::dump: cannot write the non-finite number {} (JSON has no NaN/inf)", d);
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, d);  // shortest text that reads back as the same double
  const std::string_view text(buf, size_t(r.ptr - buf));
  out += text;
  if (text.find_first_of(".e") == std::string_view::npos) out += ".0";  // stay a double when read back
}

void newline(std::string& out, int indent, int level) {
  if (indent <= 0) return;
  out += '\n';
  out.append(size_t(indent * level), ' ');
}

void dump_value(std::string& out, const Value& v, int indent, int level) {
  switch (v.type()) {
    case Type::Null: out += "null"; return;
    case Type::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Type::Int: out += std::to_string(v.as_int()); return;
    case Type::Double: dump_double(out, v.as_double()); return;
    case Type::String: dump_string(out, v.as_string()); return;
    case Type::Array: {
      const Array& a = v.as_array();
      if (a.empty()) return void(out += "[]");
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += ',';
        newline(out, indent, level + 1);
        dump_value(out, a[i], indent, level + 1);
      }
      newline(out, indent, level);
      out += ']';
      return;
    }
    case Type::Object: {
      const Object& o = v.as_object();
      if (o.empty()) return void(out += "{}");
      out += '{';
      bool first = true;
      for (const auto& [key, member] : o) {
        if (!first) out += ',';
        first = false;
        newline(out, indent, level + 1);
        dump_string(out, key);
        out += indent > 0 ? ": " : ":";
        dump_value(out, member, indent, level + 1);
      }
      newline(out, indent, level);
      out += '}';
      return;
    }
  }
}

}  // namespace

std::string dump(const Value& value, int indent) {
  std::string out;
  dump_value(out, value, indent, 0);
  return out;
}

// ---- Node ---------------------------------------------------------------------------------------------

void Node::fail(const std::string& message) const {
  if (path_.empty()) PRIMER_FAIL("{}: {}", source_, message);
  PRIMER_FAIL("{}: key \"{}\": {}", source_, path_, message);
}

void Node::expected(const char* what) const { fail(fmt::format("expected {}, got {}", what, type_name(type()))); }

const Object& Node::object_or_fail() const {
  if (!value_->is_object()) expected("an object");
  return value_->as_object();
}

bool Node::has(std::string_view key) const { return object_or_fail().contains(key); }

Node Node::at(std::string_view key) const {
  const Value* v = object_or_fail().find(key);
  const std::string child = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  if (!v) PRIMER_FAIL("{}: missing key \"{}\"", source_, child);
  return Node(*v, source_, child);
}

std::optional<Node> Node::find(std::string_view key) const {
  const Value* v = object_or_fail().find(key);
  if (!v || v->is_null()) return std::nullopt;
  return Node(*v, source_, path_.empty() ? std::string(key) : path_ + "." + std::string(key));
}

size_t Node::size() const {
  if (!value_->is_array()) expected("an array");
  return value_->as_array().size();
}

Node Node::at(size_t index) const {
  const size_t n = size();
  if (index >= n) fail(fmt::format("index {} is out of range for an array of {} elements", index, n));
  return Node(value_->as_array()[index], source_, fmt::format("{}[{}]", path_, index));
}

bool Node::as_bool() const {
  if (!value_->is_bool()) expected("a boolean");
  return value_->as_bool();
}

int64_t Node::as_int() const {
  if (value_->type() == Type::Double && !exact_integer(value_->as_double()))
    fail(fmt::format("expected an integer, got {}", dump(*value_)));
  if (!value_->is_number()) expected("an integer");
  return value_->as_int();
}

double Node::as_double() const {
  if (!value_->is_number()) expected("a number");
  return value_->as_double();
}

const std::string& Node::as_string() const {
  if (!value_->is_string()) expected("a string");
  return value_->as_string();
}

const Object& Node::as_object() const { return object_or_fail(); }

int64_t Node::int_or(std::string_view key, int64_t fallback) const {
  const auto n = find(key);
  return n ? n->as_int() : fallback;
}

double Node::double_or(std::string_view key, double fallback) const {
  const auto n = find(key);
  return n ? n->as_double() : fallback;
}

bool Node::bool_or(std::string_view key, bool fallback) const {
  const auto n = find(key);
  return n ? n->as_bool() : fallback;
}

std::string Node::string_or(std::string_view key, const std::string& fallback) const {
  const auto n = find(key);
  return n ? n->as_string() : fallback;
}

}  // namespace primer::json
