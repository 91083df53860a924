// The YAML loader (base: inheritance, --set overrides, file:line positions, closest-key suggestions) and the
// loaded Config's typed getters and resolved YAML.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/check.h"
#include "core/config/config.h"
#include "core/config/value_text.h"

namespace primer::config {
using namespace text;
namespace {

// ---- scalars (YAML 1.2 core schema, applied to plain scalars only: quoted text is always a string) ----

bool is_plain(const YAML::Node& n) { return n.Tag() == "?"; }

// A free-form YAML tree as compact JSON: plain scalars keep their core-schema type, quoted ones are strings.
std::string to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      std::string out = "{";
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (out.size() > 1) out += ", ";
        out += quoted(it->first.Scalar()) + ": " + to_json(it->second);
      }
      return out + "}";
    }
    case YAML::NodeType::Sequence: {
      std::string out = "[";
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (out.size() > 1) out += ", ";
        out += to_json(*it);
      }
      return out + "]";
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (!is_plain(n)) return quoted(s);
      if (auto b = parse_bool(s)) return *b ? "true" : "false";
      if (auto i = parse_int(s)) return fmt::format("{}", *i);
      if (auto f = parse_float(s)) return format_float(*f);
      return quoted(s);
    }
    default: return "null";
  }
}

std::string join_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, comma - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) items.push_back(item);
    start = comma + 1;
  }
  return items;
}

// Where a value or key came from, for error messages and Config::where().
struct Source {
  std::string name;  // the file path, or "--set key=value"
  bool is_file = true;

  std::string line(const YAML::Mark& m) const {
    return is_file && !m.is_null() ? fmt::format("{}:{}", name, m.line + 1) : name;
  }
  std::string line_col(const YAML::Mark& m) const {
    return is_file && !m.is_null() ? fmt::format("{}:{}:{}", name, m.line + 1, m.column + 1) : name;
  }
};

}  // namespace

// ---- loading ----

class ConfigLoader {
 public:
  ConfigLoader(const Schema& schema, const std::string& path) {
    config_.schema_ = schema;
    config_.path_ = path;
  }

  void load_file(const std::string& path, std::vector<std::string> chain) {
    std::string canonical = std::filesystem::weakly_canonical(path).string();
    chain.push_back(path);
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      if (std::filesystem::weakly_canonical(chain[i]).string() == canonical)
        PRIMER_FAIL("{}: 'base' inheritance cycle: {}", chain[0], join(chain, " -> "));
    }
    PRIMER_CHECK(!std::filesystem::is_directory(path), "config file '{}' is a directory, expected a YAML file", path);
    YAML::Node root;
    try {
      root = YAML::LoadFile(path);
    } catch (const YAML::BadFile&) {
      PRIMER_FAIL("cannot read config file '{}'", path);
    } catch (const YAML::ParserException& e) {
      PRIMER_FAIL("{}:{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg);
    }
    Source source{path, true};
    if (root.IsNull()) return;  // an empty file sets nothing
    PRIMER_CHECK(root.IsMap(), "{}: expected a mapping of keys at the top level, got {}", source.line_col(root.Mark()),
                 describe(root));
    for (auto it = root.begin(); it != root.end(); ++it) {
      if (it->first.Scalar() != kBaseKey) continue;
      const YAML::Node base = it->second;  // a copy: it->second is a member of a temporary
      PRIMER_CHECK(base.IsScalar(), "{}: 'base' expected a file path, got {}", source.line_col(base.Mark()),
                   describe(base));
      auto resolved = (std::filesystem::path(path).parent_path() / base.Scalar()).lexically_normal();
      PRIMER_CHECK(std::filesystem::exists(resolved), "{}: base file '{}' not found (looked for {})",
                   source.line(it->first.Mark()), base.Scalar(), resolved.string());
      load_file(resolved.string(), chain);
    }
    std::map<std::string, std::string> assigned_here;  // path -> where, to catch duplicate keys
    walk(root, "", source, assigned_here);
  }

  void load_mapping(const std::string& json_text, const std::string& where) {
    allow_base_ = false;  // `base:` is a file-level key
    Source source{where, false};
    YAML::Node root;
    try {
      root = YAML::Load(json_text);  // JSON is YAML's flow style; typed scalars stay plain, strings stay quoted
    } catch (const YAML::ParserException& e) {
      PRIMER_FAIL("{}: not a valid mapping: {}", where, e.msg);
    }
    PRIMER_CHECK(root.IsMap(), "{}: expected a mapping of keys, got {}", where, describe(root));
    std::map<std::string, std::string> assigned;
    walk(root, "", source, assigned);
  }

  void apply_override(const std::string& text) {
    Source source{"--set " + text, false};
    auto eq = text.find('=');
    PRIMER_CHECK(eq != std::string::npos && eq > 0, "{}: expected key.path=value", source.name);
    std::string key = text.substr(0, eq);
    YAML::Node value;
    try {
      value = YAML::Load(text.substr(eq + 1));
    } catch (const YAML::ParserException& e) {
      PRIMER_FAIL("{}: YAML syntax error in the value: {}", source.name, e.msg);
    }
    if (const Field* f = enclosing_map_field(key))
      PRIMER_FAIL("{}: '{}' is a free-form mapping and is set whole, e.g. --set '{}={{key: value}}'", source.name,
                  f->key, f->key);
    std::map<std::string, std::string> assigned;
    assign_or_descend(key, value, YAML::Mark::null_mark(), source, assigned);
  }

  Config finish() {
    std::vector<std::string> missing;
    for (const Field& f : config_.schema_.fields()) {
      if (config_.entries_.count(f.key)) continue;
      if (f.presence == Presence::Required) missing.push_back(fmt::format("'{}' ({})", f.key, f.doc));
      config_.entries_[f.key] = {f.default_value, "default"};
    }
    PRIMER_CHECK(missing.empty(), "{}: missing required key{} {}", config_.path_, missing.size() > 1 ? "s" : "",
                 join(missing, ", "));
    for (const auto& check : config_.schema_.checks()) check(config_);
    return std::move(config_);
  }

 private:
  static std::string describe(const YAML::Node& n) {
    switch (n.Type()) {
      case YAML::NodeType::Map: return "a mapping";
      case YAML::NodeType::Sequence: return "a list";
      case YAML::NodeType::Scalar: return is_plain(n) ? n.Scalar() : quoted(n.Scalar());
      default: return "null";
    }
  }

  const Field* enclosing_map_field(const std::string& path) const {
    for (auto dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
      const Field* f = config_.schema_.find(path.substr(0, dot));
      if (f && f->type == FieldType::Map) return f;
    }
    return nullptr;
  }

  void walk(const YAML::Node& mapping, const std::string& prefix, const Source& source,
            std::map<std::string, std::string>& assigned_here) {
    for (auto it = mapping.begin(); it != mapping.end(); ++it) {
      const std::string& key = it->first.Scalar();
      if (prefix.empty() && key == kBaseKey && allow_base_) continue;
      assign_or_descend(join_path(prefix, key), it->second, it->first.Mark(), source, assigned_here);
    }
  }

  void assign_or_descend(const std::string& path, const YAML::Node& value, const YAML::Mark& key_mark,
                         const Source& source, std::map<std::string, std::string>& assigned_here) {
    const Schema& schema = config_.schema_;
    if (const Field* f = schema.find(path)) {
      auto [it, fresh] = assigned_here.emplace(path, source.line(key_mark));
      PRIMER_CHECK(fresh, "{}: duplicate key '{}' (first set at {})", source.line(key_mark), path, it->second);
      YAML::Mark value_mark = value.Mark().is_null() ? key_mark : value.Mark();
      config_.entries_[path] = {convert(*f, value, source.line_col(value_mark)), source.line(key_mark)};
      return;
    }
    if (schema.is_section(path)) {
      PRIMER_CHECK(value.IsMap(), "{}: '{}' is a section; expected a mapping of its keys, got {}",
                   source.line_col(value.Mark().is_null() ? key_mark : value.Mark()), path, describe(value));
      walk(value, path, source, assigned_here);
      return;
    }
    std::string suggestion = closest_key(path);
    PRIMER_FAIL("{}: unknown key '{}'{}", source.line(key_mark), path,
                suggestion.empty() ? "" : fmt::format("; did you mean '{}'?", suggestion));
  }

  // The declared key (or section) nearest to an unknown one; a key put in the wrong section finds its home.
  std::string closest_key(const std::string& path) const {
    std::vector<std::string> candidates;
    for (const Field& f : config_.schema_.fields()) {
      candidates.push_back(f.key);
      for (auto dot = f.key.find('.'); dot != std::string::npos; dot = f.key.find('.', dot + 1))
        candidates.push_back(f.key.substr(0, dot));
    }
    return config::closest_key(path, candidates);
  }

  static std::optional<Value> convert(const Field& f, const YAML::Node& n, const std::string& where) {
    auto fail = [&](const std::string& got) -> Value {
      PRIMER_FAIL("{}: '{}' expected {}, got {}", where, f.key, f.expectation(), got);
    };
    if (n.IsNull()) {
      if (f.presence == Presence::Optional) return std::nullopt;
      return fail("null");
    }
    if (f.type == FieldType::Map) return convert_map(n, fail);
    if (f.type == FieldType::StringList && n.IsSequence()) {
      std::vector<std::string> items;
      for (const auto& item : n) {
        if (!item.IsScalar()) return fail("a list containing " + describe(item));
        items.push_back(item.Scalar());
      }
      return items;
    }
    if (!n.IsScalar()) return fail(describe(n));
    const std::string& s = n.Scalar();
    const bool plain = is_plain(n);
    switch (f.type) {
      case FieldType::Int: {
        auto v = plain ? parse_int(s) : std::nullopt;
        if (!v) return fail(quoted(s));
        if (!in_range(f, double(*v))) return fail(s);
        return *v;
      }
      case FieldType::Float: {
        auto v = plain ? parse_float(s) : std::nullopt;
        if (!v) return fail(quoted(s));
        if (!in_range(f, *v)) return fail(s);
        return *v;
      }
      case FieldType::Bool: {
        auto v = plain ? parse_bool(s) : std::nullopt;
        if (!v) return fail(quoted(s));
        return *v;
      }
      case FieldType::Enum:
        if (std::find(f.allowed.begin(), f.allowed.end(), s) == f.allowed.end()) return fail(quoted(s));
        return s;
      case FieldType::StringList: return split_list(s);
      default: return s;
    }
  }

  template <class Fail> static Value convert_map(const YAML::Node& n, Fail fail) {
    if (n.IsMap()) return MapValue{to_json(n)};
    if (!n.IsScalar()) return fail(describe(n));
    YAML::Node parsed;
    try {
      parsed = YAML::Load(n.Scalar());
    } catch (const YAML::ParserException& e) {
      return fail(fmt::format("{} (not a valid JSON object: {})", quoted(n.Scalar()), e.msg));
    }
    if (!parsed.IsMap()) return fail(quoted(n.Scalar()));
    return MapValue{to_json(parsed)};
  }

  Config config_;
  bool allow_base_ = true;
};

Config load_config_mapping(const std::string& json_text, const Schema& schema, const std::string& where) {
  ConfigLoader loader(schema, where);
  loader.load_mapping(json_text, where);
  return loader.finish();
}

Config load_config(const std::string& path, const Schema& schema, const std::vector<std::string>& overrides) {
  ConfigLoader loader(schema, path);
  loader.load_file(path, {});
  for (const auto& o : overrides) loader.apply_override(o);
  return loader.finish();
}

// ---- Config ----

const Config::Entry& Config::entry(const std::string& key, FieldType expected_a, FieldType expected_b) const {
  const Field* f = schema_.find(key);
  if (!f) PRIMER_FAIL("config: '{}' is not a key of the schema (declare it before reading it)", key);
  PRIMER_CHECK(f->type == expected_a || f->type == expected_b, "config: '{}' is declared as {} but read as {}", key,
               type_name(f->type), type_name(expected_a));
  const Entry& e = entries_.at(key);
  PRIMER_CHECK(e.value.has_value(), "config: '{}' is not set (it is optional: check has() first)", key);
  return e;
}

int64_t Config::get_int(const std::string& key) const {
  return std::get<int64_t>(*entry(key, FieldType::Int, FieldType::Int).value);
}
double Config::get_float(const std::string& key) const {
  return std::get<double>(*entry(key, FieldType::Float, FieldType::Float).value);
}
bool Config::get_bool(const std::string& key) const {
  return std::get<bool>(*entry(key, FieldType::Bool, FieldType::Bool).value);
}
std::string Config::get_string(const std::string& key) const {
  return std::get<std::string>(*entry(key, FieldType::String, FieldType::Enum).value);
}
std::vector<std::string> Config::get_list(const std::string& key) const {
  return std::get<std::vector<std::string>>(*entry(key, FieldType::StringList, FieldType::StringList).value);
}
std::string Config::get_map_json(const std::string& key) const {
  return std::get<MapValue>(*entry(key, FieldType::Map, FieldType::Map).value).json;
}

bool Config::has(const std::string& key) const {
  if (!schema_.find(key)) PRIMER_FAIL("config: '{}' is not a key of the schema (declare it before reading it)", key);
  return entries_.at(key).value.has_value();
}

std::string Config::where(const std::string& key) const {
  if (!schema_.find(key)) PRIMER_FAIL("config: '{}' is not a key of the schema (declare it before reading it)", key);
  return entries_.at(key).origin;
}

std::string Config::resolved_yaml() const {
  std::string out = "# Resolved configuration: every key with its final value (defaults filled in).\n";
  // Children of a section in order of first declaration, so a section is written once even when its keys
  // were declared apart.
  std::function<void(const std::string&, int)> emit = [&](const std::string& prefix, int depth) {
    std::set<std::string> done;
    for (const Field& f : schema_.fields()) {
      if (!prefix.empty() && f.key.compare(0, prefix.size() + 1, prefix + ".") != 0) continue;
      std::string rest = prefix.empty() ? f.key : f.key.substr(prefix.size() + 1);
      std::string child = rest.substr(0, rest.find('.'));
      if (!done.insert(child).second) continue;
      std::string indent(size_t(2 * depth), ' ');
      if (child == rest) {
        const auto& value = entries_.at(f.key).value;
        out += fmt::format("{}{}: {}\n", indent, child, value ? yaml_value(*value) : "null");
      } else {
        out += fmt::format("{}{}:\n", indent, child);
        emit(join_path(prefix, child), depth + 1);
      }
    }
  };
  emit("", 0);
  return out;
}

}  // namespace primer::config
