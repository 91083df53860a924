#include "tools/primer/option_checks.h"

#include <cmath>
#include <cstdlib>
#include <optional>

namespace primer::tools {
namespace {

// The whole text as a finite number, or nothing.
std::optional<double> parse_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string format_bound(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", v);
  return buffer;
}

}  // namespace

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::optional<double> v = parse_number(text);
        if (!v) return "expected a number > 0, got '" + text + "'";
        return *v > 0 ? std::string() : "expected a number > 0, got " + text;
      },
      "> 0", "positive number");
}

CLI::Validator number_in(double lo, double hi) {
  const std::string range = "[" + format_bound(lo) + ", " + format_bound(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const std::optional<double> v = parse_number(text);
        if (!v) return "expected a number in " + range + ", got '" + text + "'";
        return *v >= lo && *v <= hi ? std::string() : "expected a number in " + range + ", got " + text;
      },
      "in " + range, "number in " + range);
}

}  // namespace primer::tools
