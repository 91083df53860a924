// Files that appear complete or not at all: written under a temporary name in the destination directory,
// flushed to disk, then renamed over the final name (rename is atomic within one file system) and the
// directory entry flushed. A crash or an error before commit() never leaves a partial file under the final
// name; the destructor removes the temporary.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace primer::io {

class AtomicFile {
 public:
  explicit AtomicFile(std::string final_path);  // creates "<dir>/.<name>.tmp-<pid>"
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void commit();  // fsync, close, rename into place, fsync the directory

  const std::string& final_path() const { return final_path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string final_path_, temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `contents` to `path` atomically.
void write_file_atomic(const std::string& path, std::string_view contents);
// True for the temporary names AtomicFile uses, so that tools can spot leftovers.
bool is_atomic_temp_name(std::string_view file_name);

}  // namespace primer::io
