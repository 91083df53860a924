// A small JSON document model (RFC 8259) for config.json, tokenizer.json, safetensors headers and
// checkpoint manifests. Objects keep their keys in insertion order so that what we write reads like what
// we were given; integers that fit in int64 stay exact. `Node` is a read-only cursor that remembers the
// file and key path, so that every user-facing error says e.g.
//   config.json: key "rope_scaling.factor": expected a number, got string
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace primer::json {

enum class Type { Null, Bool, Int, Double, String, Array, Object };
const char* type_name(Type t);  // "null", "bool", "integer", "number", "string", "array", "object"

class Value;
using Array = std::vector<Value>;

// Key/value pairs in insertion order; lookups are linear for small objects and hashed for large ones
// (a tokenizer vocabulary holds ~150k keys).
class Object {
 public:
  using Item = std::pair<std::string, Value>;

  size_t size() const;
  bool empty() const;
  std::vector<Item>::const_iterator begin() const;
  std::vector<Item>::const_iterator end() const;

  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // Sets `key` (replacing its value in place if present, else appending); returns the stored value.
  Value& set(std::string key, Value value);
  // Appends a key known to be new; returns false (and changes nothing) if it is already present.
  bool insert_new(std::string key, Value&& value);
  bool erase(std::string_view key);

 private:
  static constexpr size_t kIndexFrom = 16;  // below this, a linear scan beats hashing
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;  // filled once size() reaches kIndexFrom

  std::optional<size_t> position(std::string_view key) const;
  void rebuild_index();
};

bool operator==(const Object& a, const Object& b);  // same keys in the same order with equal values

class Value {
 public:
  Value() = default;  // null
  Value(std::nullptr_t) {}
  Value(bool b) : data_(b) {}
  Value(int v) : data_(int64_t(v)) {}
  Value(int64_t v) : data_(v) {}
  Value(double v) : data_(v) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(Array a) : data_(std::move(a)) {}
  Value(Object o) : data_(std::move(o)) {}

  Type type() const { return Type(data_.index()); }
  bool is_null() const { return type() == Type::Null; }
  bool is_bool() const { return type() == Type::Bool; }
  bool is_int() const { return type() == Type::Int; }
  bool is_number() const { return type() == Type::Int || type() == Type::Double; }
  bool is_string() const { return type() == Type::String; }
  bool is_array() const { return type() == Type::Array; }
  bool is_object() const { return type() == Type::Object; }

  // Checked accessors; a mismatch throws "JSON value: expected <what>, got <type>". Use Node for errors that
  // name the file and key.
  bool as_bool() const;
  int64_t as_int() const;    // an integer, or a double with an exact integral value
  double as_double() const;  // any number
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Object member access for building documents: turns null into an empty object, then sets/gets `key`.
  Value& operator[](std::string_view key);

  bool operator==(const Value& other) const { return data_ == other.data_; }

 private:
  std::variant<std::nullptr_t, bool, int64_t, double, std::string, Array, Object> data_;
};

inline size_t Object::size() const { return items_.size(); }
inline bool Object::empty() const { return items_.empty(); }
inline std::vector<Object::Item>::const_iterator Object::begin() const { return items_.begin(); }
inline std::vector<Object::Item>::const_iterator Object::end() const { return items_.end(); }

// Parses one JSON document. Errors name `source_name`, the line:column and what was expected, e.g.
//   config.json:3:17: expected ',' or '}' after an object member, got '"'
// first_line: the line number of text's first line in its file (a JSONL record names its own line).
Value parse(std::string_view text, const std::string& source_name, int64_t first_line = 1);
// Reads and parses a file (memory-mapped); errors name the path.
Value parse_file(const std::string& path);

// indent 0: compact on one line; indent > 0: one member per line, indented by that many spaces per level.
// Doubles are written in their shortest round-trip form (always with '.' or an exponent, so they parse back
// as doubles); non-ASCII text is written as UTF-8. Non-finite doubles are an error (JSON has none).
std::string dump(const Value& value, int indent = 0);

// A read-only position in a document that knows its source and key path, for precise errors.
class Node {
 public:
  Node(const Value& value, std::string source) : value_(&value), source_(std::move(source)) {}

  const Value& value() const { return *value_; }
  const std::string& path() const { return path_; }  // "rope_scaling.factor", "eos_token_id[1]", "" at the root
  const std::string& source() const { return source_; }
  Type type() const { return value_->type(); }
  bool is_null() const { return value_->is_null(); }

  // Members of an object node (errors if this node is not an object).
  bool has(std::string_view key) const;                  // present (null counts as present)
  Node at(std::string_view key) const;                   // required: missing → error naming the key
  std::optional<Node> find(std::string_view key) const;  // absent or null → nullopt
  // Elements of an array node.
  size_t size() const;  // array length
  Node at(size_t index) const;

  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;
  const std::string& as_string() const;
  const Object& as_object() const;

  // Optional members with a default when absent or null.
  int64_t int_or(std::string_view key, int64_t fallback) const;
  double double_or(std::string_view key, double fallback) const;
  bool bool_or(std::string_view key, bool fallback) const;
  std::string string_or(std::string_view key, const std::string& fallback) const;

  // Throws "<source>: key "<path>": <message>" (or "<source>: <message>" at the root).
  [[noreturn]] void fail(const std::string& message) const;

 private:
  Node(const Value& value, std::string source, std::string path)
      : value_(&value), source_(std::move(source)), path_(std::move(path)) {}
  [[noreturn]] void expected(const char* what) const;
  const Object& object_or_fail() const;

  const Value* value_;
  std::string source_, path_;
};

}  // namespace primer::json
