// A read-only memory map of a whole file (RAII). Checkpoints and tokenizer files are read through it, so a
// multi-GB safetensors shard costs no copy until a tensor is loaded, and only the pages touched are read.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace primer::io {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // errors name the path and the system's reason
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }  // nullptr for an empty file
  size_t size() const { return size_; }
  std::string_view text() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;

  void unmap();
};

}  // namespace primer::io
