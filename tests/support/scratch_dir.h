// A fresh temporary directory per test (named by test, process and seed), removed afterwards.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

namespace primer::test {

struct ScratchDir {
  std::filesystem::path path;
  ScratchDir(const std::string& name, uint64_t seed)
      : path(std::filesystem::temp_directory_path() / fmt::format("primer-test-{}-{}-{}", name, ::getpid(), seed)) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

}  // namespace primer::test
