#include "core/config/value_text.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <regex>

namespace primer::config::text {

std::optional<bool> parse_bool(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

std::optional<int64_t> parse_int(const std::string& s) {
  static const std::regex pattern("[-+]?[0-9]+");
  if (!std::regex_match(s, pattern)) return std::nullopt;
  const char* begin = s.data() + (s[0] == '+' ? 1 : 0);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(begin, s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_float(const std::string& s) {
  static const std::regex pattern(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (!std::regex_match(s, pattern)) return std::nullopt;
  double v = std::strtod(s.c_str(), nullptr);
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

// Text that reads back as the same double and still looks like a float (1e6 -> "1000000.0").
std::string format_float(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// A JSON string literal; also a valid YAML double-quoted scalar.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20)
          out += fmt::format("\\u{:04x}", c);
        else
          out += char(c);
    }
  }
  return out + "\"";
}

// A string as a YAML scalar: plain when it cannot be mistaken for anything else, else double-quoted.
std::string yaml_string(const std::string& s) {
  static const std::regex safe("[A-Za-z0-9_./][A-Za-z0-9_./@+-]*");
  bool looks_typed = s == "~" || s == "null" || s == "Null" || s == "NULL" || parse_bool(s) || parse_float(s);
  return std::regex_match(s, safe) && !looks_typed ? s : quoted(s);
}

std::string range_text(const Field& f) {
  auto num = [](double v) { return fmt::format("{}", v); };
  if (f.min && f.max)
    return fmt::format(" in {}{}, {}{}", f.min_exclusive ? "(" : "[", num(*f.min), num(*f.max),
                       f.max_exclusive ? ")" : "]");
  if (f.min) return fmt::format(" {} {}", f.min_exclusive ? ">" : ">=", num(*f.min));
  if (f.max) return fmt::format(" {} {}", f.max_exclusive ? "<" : "<=", num(*f.max));
  return "";
}

bool in_range(const Field& f, double v) {
  if (f.min && (f.min_exclusive ? v <= *f.min : v < *f.min)) return false;
  if (f.max && (f.max_exclusive ? v >= *f.max : v > *f.max)) return false;
  return true;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

const char* type_name(FieldType t) {
  switch (t) {
    case FieldType::Int: return "integer";
    case FieldType::Float: return "number";
    case FieldType::Bool: return "bool";
    case FieldType::String: return "string";
    case FieldType::StringList: return "string list";
    case FieldType::Enum: return "enum";
    case FieldType::Map: return "mapping";
  }
  return "?";
}

// A value as it appears in resolved YAML (and in the docs' default column).
std::string yaml_value(const Value& v) {
  struct Visitor {
    std::string operator()(int64_t i) const { return fmt::format("{}", i); }
    std::string operator()(double d) const { return format_float(d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const { return yaml_string(s); }
    std::string operator()(const std::vector<std::string>& l) const {
      std::vector<std::string> items;
      for (const auto& s : l) items.push_back(yaml_string(s));
      return "[" + join(items, ", ") + "]";
    }
    std::string operator()(const MapValue& m) const { return m.json; }
  };
  return std::visit(Visitor{}, v);
}

}  // namespace primer::config::text
