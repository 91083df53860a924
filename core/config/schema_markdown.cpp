#include <fmt/format.h>

#include "core/config/config.h"
#include "core/config/value_text.h"

namespace primer::config {
using namespace text;

// ---- docs ----

std::string render_schema_markdown(const Schema& schema) {
  auto cell = [](std::string s) {
    for (size_t p = s.find('|'); p != std::string::npos; p = s.find('|', p + 2)) s.replace(p, 1, "\\|");
    return s;
  };
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const Field& f : schema.fields()) {
    std::string type = type_name(f.type) + range_text(f);
    if (f.type == FieldType::Enum) {
      std::vector<std::string> values;
      for (const auto& a : f.allowed) values.push_back(fmt::format("`{}`", a));
      type = "one of " + join(values, ", ");
    }
    std::string def = f.presence == Presence::Required ? "**required**"
                      : f.default_value                ? fmt::format("`{}`", yaml_value(*f.default_value))
                                                       : "unset";
    out += fmt::format("| `{}` | {} | {} | {} |\n", f.key, cell(type), cell(def), cell(f.doc));
  }
  return out;
}

}  // namespace primer::config
