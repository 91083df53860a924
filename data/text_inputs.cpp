#include "data/text_inputs.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>

#include "core/check.h"

namespace primer::data {
namespace fs = std::filesystem;

std::vector<std::string> expand_inputs(const std::vector<std::string>& entries, const std::string& where) {
  std::vector<std::string> files;
  for (const std::string& entry : entries) {
    std::vector<std::string> found;
    if (fs::is_directory(entry)) {
      for (const auto& e : fs::recursive_directory_iterator(entry, fs::directory_options::follow_directory_symlink))
        if (e.is_regular_file()) found.push_back(e.path().string());
    } else if (entry.find_first_of("*?[") != std::string::npos) {
      glob_t matches{};
      const int rc = ::glob(entry.c_str(), 0, nullptr, &matches);  // unreadable or missing directories match nothing
      for (size_t i = 0; rc == 0 && i < matches.gl_pathc; ++i)
        if (fs::is_regular_file(matches.gl_pathv[i])) found.push_back(matches.gl_pathv[i]);
      ::globfree(&matches);
      PRIMER_CHECK(rc == 0 || rc == GLOB_NOMATCH, "{}: cannot expand '{}' (glob error {})", where, entry, rc);
    } else {
      PRIMER_CHECK(fs::is_regular_file(entry), "{}: '{}' is not a file, directory or glob pattern that exists", where,
                   entry);
      found.push_back(entry);
    }
    PRIMER_CHECK(!found.empty(), "{}: '{}' matches no file", where, entry);
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

std::vector<std::pair<size_t, size_t>> line_aligned_chunks(std::string_view text, size_t target_bytes) {
  PRIMER_CHECK(target_bytes > 0, "chunk size must be positive");
  std::vector<std::pair<size_t, size_t>> chunks;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.size();
    if (text.size() - begin > target_bytes) {
      const size_t newline = text.find('\n', begin + target_bytes - 1);
      if (newline != std::string_view::npos) end = newline + 1;
    }
    chunks.emplace_back(begin, end);
    begin = end;
  }
  return chunks;
}

}  // namespace primer::data
