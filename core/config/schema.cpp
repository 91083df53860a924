// Fields (types, defaults, ranges, allowed values) and the Schema that declares them.
#include <fmt/format.h>

#include <regex>

#include "core/check.h"
#include "core/config/config.h"
#include "core/config/value_text.h"

namespace primer::config {
using namespace text;

// ---- Field ----

Field& Field::required() {
  presence = Presence::Required;
  default_value.reset();
  return *this;
}

Field& Field::optional() {
  presence = Presence::Optional;
  default_value.reset();
  return *this;
}

namespace {
Field& set_default(Field& f, Value v, std::initializer_list<FieldType> fits) {
  PRIMER_CHECK(std::find(fits.begin(), fits.end(), f.type) != fits.end(),
               "schema: default {} does not fit '{}', a {} field", yaml_value(v), f.key, type_name(f.type));
  if (f.type == FieldType::Float && std::holds_alternative<int64_t>(v)) v = double(std::get<int64_t>(v));
  if (f.type == FieldType::Enum)
    PRIMER_CHECK(std::find(f.allowed.begin(), f.allowed.end(), std::get<std::string>(v)) != f.allowed.end(),
                 "schema: default '{}' of '{}' is not one of {}", std::get<std::string>(v), f.key,
                 join(f.allowed, ", "));
  f.presence = Presence::Defaulted;
  f.default_value = std::move(v);
  return f;
}
}  // namespace

Field& Field::defaults(int64_t v) { return set_default(*this, v, {FieldType::Int, FieldType::Float}); }
Field& Field::defaults(double v) { return set_default(*this, v, {FieldType::Float}); }
Field& Field::defaults(bool v) { return set_default(*this, v, {FieldType::Bool}); }
Field& Field::defaults(std::string v) { return set_default(*this, std::move(v), {FieldType::String, FieldType::Enum}); }
Field& Field::defaults(std::vector<std::string> v) { return set_default(*this, std::move(v), {FieldType::StringList}); }

Field& Field::at_least(double v) {
  PRIMER_CHECK(type == FieldType::Int || type == FieldType::Float, "schema: '{}' is not numeric", key);
  min = v;
  min_exclusive = false;
  return *this;
}

Field& Field::above(double v) {
  at_least(v);
  min_exclusive = true;
  return *this;
}

Field& Field::at_most(double v) {
  PRIMER_CHECK(type == FieldType::Int || type == FieldType::Float, "schema: '{}' is not numeric", key);
  max = v;
  max_exclusive = false;
  return *this;
}

Field& Field::below(double v) {
  at_most(v);
  max_exclusive = true;
  return *this;
}

std::string Field::expectation() const {
  switch (type) {
    case FieldType::Int: return "an integer" + range_text(*this);
    case FieldType::Float: return "a number" + range_text(*this);
    case FieldType::Bool: return "true or false";
    case FieldType::String: return "a string";
    case FieldType::StringList: return "a list of strings (a YAML list or a comma-separated string)";
    case FieldType::Enum: return "one of " + join(allowed, ", ");
    case FieldType::Map: return "a mapping (YAML, or a string holding a JSON object)";
  }
  return "";
}

// ---- Schema ----

Field& Schema::add(const std::string& key, FieldType type, const std::string& doc) {
  static const std::regex segment("[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*");
  PRIMER_CHECK(std::regex_match(key, segment), "schema: key '{}' must be dot-separated identifiers", key);
  PRIMER_CHECK(key != kBaseKey, "schema: '{}' is reserved for inheritance", key);
  PRIMER_CHECK(!index_.count(key), "schema: key '{}' declared twice", key);
  PRIMER_CHECK(!is_section(key), "schema: '{}' is already a section of other keys", key);
  for (auto dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1))
    PRIMER_CHECK(!index_.count(key.substr(0, dot)), "schema: '{}' nests under the field '{}'", key, key.substr(0, dot));
  index_[key] = fields_.size();
  Field& f = fields_.emplace_back();
  f.key = key;
  f.type = type;
  f.doc = doc;
  return f;
}

Field& Schema::add_int(const std::string& key, const std::string& doc) { return add(key, FieldType::Int, doc); }
Field& Schema::add_float(const std::string& key, const std::string& doc) { return add(key, FieldType::Float, doc); }
Field& Schema::add_bool(const std::string& key, const std::string& doc) { return add(key, FieldType::Bool, doc); }
Field& Schema::add_string(const std::string& key, const std::string& doc) { return add(key, FieldType::String, doc); }
Field& Schema::add_string_list(const std::string& key, const std::string& doc) {
  return add(key, FieldType::StringList, doc);
}
Field& Schema::add_enum(const std::string& key, std::vector<std::string> allowed, const std::string& doc) {
  PRIMER_CHECK(!allowed.empty(), "schema: enum '{}' needs allowed values", key);
  Field& f = add(key, FieldType::Enum, doc);
  f.allowed = std::move(allowed);
  return f;
}
Field& Schema::add_map(const std::string& key, const std::string& doc) { return add(key, FieldType::Map, doc); }

void Schema::add_check(std::function<void(const Config&)> check) { checks_.push_back(std::move(check)); }

const Field* Schema::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &fields_[it->second];
}

bool Schema::is_section(const std::string& path) const {
  auto it = index_.lower_bound(path + ".");
  return it != index_.end() && it->first.compare(0, path.size() + 1, path + ".") == 0;
}

}  // namespace primer::config
