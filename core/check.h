// Errors. Every failure is a primer::Error whose message names what was wrong, what was expected and
// where (file:line). PRIMER_CHECK is for user-facing validation; PRIMER_FAIL for unconditional errors.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace primer {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);

}  // namespace primer

#define PRIMER_FAIL(...) ::primer::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
#define PRIMER_CHECK(cond, ...) \
  do {                          \
    if (!(cond)) [[unlikely]]   \
      PRIMER_FAIL(__VA_ARGS__); \
  } while (0)
