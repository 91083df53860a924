// How recipe values are read from and written as YAML/JSON text (YAML 1.2 core schema scalars, quoting, the
// resolved-YAML form of a value) and described in messages (types, ranges): shared by the schema, the loader and
// the generated Markdown reference.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace primer::config::text {

// A plain YAML 1.2 core-schema scalar as bool, integer or finite number; nullopt when it is not one.
std::optional<bool> parse_bool(const std::string& s);
std::optional<int64_t> parse_int(const std::string& s);
std::optional<double> parse_float(const std::string& s);

// Text that reads back as the same double and still looks like a float (1e6 -> "1000000.0").
std::string format_float(double v);

// A JSON string literal; also a valid YAML double-quoted scalar.
std::string quoted(const std::string& s);

// A string as a YAML scalar: plain when it cannot be mistaken for anything else, else double-quoted.
std::string yaml_string(const std::string& s);

// A numeric field's range as message text (" in [0, 1)", " >= 1"; empty without bounds), and whether v is in it.
std::string range_text(const Field& f);
bool in_range(const Field& f, double v);

std::string join(const std::vector<std::string>& items, const std::string& sep);

// "integer", "number", "bool", ...: a field type as users read it.
const char* type_name(FieldType t);

// A value as it appears in resolved YAML (and in the docs' default column).
std::string yaml_value(const Value& v);

}  // namespace primer::config::text
