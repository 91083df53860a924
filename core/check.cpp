#include "core/check.h"

namespace primer {

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg) {
  throw Error(fmt::format("{} ({}:{})", msg, file, line));
}

}  // namespace primer
