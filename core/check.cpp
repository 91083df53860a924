#include "core/check.h"

namespace primer {

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg) {
  std::string where = file;
  if (auto p = where.rfind("/core/"); p != std::string::npos) where = where.substr(p + 1);
  throw Error(fmt::format("{} ({}:{})", msg, where, line));
}

}  // namespace primer
