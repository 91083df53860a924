// Recipe configuration: a Schema of typed fields addressed by dotted key paths, a loader that validates a
// YAML file (plus `base:` inheritance and `--set key=value` overrides) against it with errors that point at
// file:line, and the resulting Config with typed getters and a re-loadable resolved YAML.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace primer::config {

enum class FieldType { Int, Float, Bool, String, StringList, Enum, Map };

// A free-form mapping (e.g. an inline config.json), held as compact JSON text.
struct MapValue {
  std::string json;
  bool operator==(const MapValue&) const = default;
};

using Value = std::variant<int64_t, double, bool, std::string, std::vector<std::string>, MapValue>;

// Required: the recipe must set it. Defaulted: falls back to its default. Optional: may stay unset (null).
enum class Presence { Required, Defaulted, Optional };

struct Field {
  std::string key;  // dotted path, e.g. "learning_rate" or "optim.learning_rate"
  FieldType type = FieldType::String;
  std::string doc;  // one line
  Presence presence = Presence::Optional;
  std::optional<Value> default_value;
  std::optional<double> min, max;  // Int and Float only
  bool min_exclusive = false, max_exclusive = false;
  std::vector<std::string> allowed;  // Enum only

  // Chainable declaration helpers; each checks that it fits the field's type.
  Field& required();
  Field& optional();
  Field& defaults(int64_t v);
  Field& defaults(int v) { return defaults(int64_t(v)); }
  Field& defaults(double v);
  Field& defaults(bool v);
  Field& defaults(const char* v) { return defaults(std::string(v)); }
  Field& defaults(std::string v);
  Field& defaults(std::vector<std::string> v);
  Field& at_least(double v);
  Field& above(double v);
  Field& at_most(double v);
  Field& below(double v);

  // "an integer >= 1", "one of pt, sft, hkd", ...: what a value must look like, for errors and docs.
  std::string expectation() const;
};

class Config;

class Schema {
 public:
  Field& add_int(const std::string& key, const std::string& doc);
  Field& add_float(const std::string& key, const std::string& doc);
  Field& add_bool(const std::string& key, const std::string& doc);
  Field& add_string(const std::string& key, const std::string& doc);
  Field& add_string_list(const std::string& key, const std::string& doc);
  Field& add_enum(const std::string& key, std::vector<std::string> allowed, const std::string& doc);
  Field& add_map(const std::string& key, const std::string& doc);

  // A rule across fields, run after everything is loaded; it throws (PRIMER_FAIL) naming Config::where().
  void add_check(std::function<void(const Config&)> check);

  const std::deque<Field>& fields() const { return fields_; }
  const Field* find(const std::string& key) const;  // nullptr when not declared
  bool is_section(const std::string& path) const;   // a proper prefix of some field's key
  const std::vector<std::function<void(const Config&)>>& checks() const { return checks_; }

 private:
  Field& add(const std::string& key, FieldType type, const std::string& doc);

  std::deque<Field> fields_;  // declaration order; deque keeps references from add_* valid
  std::map<std::string, size_t> index_;
  std::vector<std::function<void(const Config&)>> checks_;
};

// The key reserved for inheritance: `base: other.yaml` (relative to the file that names it).
inline constexpr const char* kBaseKey = "base";

class Config {
 public:
  // Getters take a declared key (anything else is a programming error) of the matching type; a getter
  // on an Optional field that is unset fails, so check has() first.
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;  // String and Enum fields
  std::vector<std::string> get_list(const std::string& key) const;
  std::string get_map_json(const std::string& key) const;  // Map fields, as JSON text
  bool has(const std::string& key) const;                  // false only for an unset Optional field

  // Where the final value came from: "run.yaml:12", "--set max_steps=10" or "default".
  std::string where(const std::string& key) const;
  // The file the config was loaded from (errors about missing keys name it).
  const std::string& path() const { return path_; }
  const Schema& schema() const { return schema_; }

  // Every field with its final value, in schema order, nested by section; load_config reads it back to the
  // same values.
  std::string resolved_yaml() const;

 private:
  friend class ConfigLoader;
  struct Entry {
    std::optional<Value> value;
    std::string origin;
  };
  const Entry& entry(const std::string& key, FieldType expected_a, FieldType expected_b) const;

  Schema schema_;
  std::string path_;
  std::map<std::string, Entry> entries_;
};

// Loads `path` (following `base:` files) and applies `overrides` ("key.path=value", values parsed as YAML
// scalars or flow sequences/mappings), validating everything against `schema`.
Config load_config(const std::string& path, const Schema& schema, const std::vector<std::string>& overrides = {});

// Validates one free-form mapping (JSON text, as a Map field holds it; e.g. one source of a tokenize job)
// against `schema` with the same checks as a file: unknown keys with the closest suggestion, types, ranges,
// required keys, defaults and cross-key checks. Errors and Config::where() name `where` ("job.yaml:4 sources.docs").
Config load_config_mapping(const std::string& json_text, const Schema& schema, const std::string& where);

// The candidate nearest to an unknown `key` (dotted paths compare whole and by last component, so that a key put in
// the wrong section finds its home); "" when none is close enough to suggest.
std::string closest_key(const std::string& key, const std::vector<std::string>& candidates);

// The schema as a Markdown table (key, type, default, meaning), for the generated recipe reference.
std::string render_schema_markdown(const Schema& schema);

}  // namespace primer::config
