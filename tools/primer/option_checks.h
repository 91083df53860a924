// Checks of the primer CLI's numeric options whose errors say what was expected: CLI11's own PositiveNumber and
// Range report "Value 0 not in range 0.000000 to 1797693...". A check returns "" when the value is acceptable.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace primer::tools {

// A number > 0 (integers and reals alike; the option's own type still parses it afterwards).
CLI::Validator positive_number();
// A number in [lo, hi].
CLI::Validator number_in(double lo, double hi);

}  // namespace primer::tools
