#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/io/durable_file.h"

namespace primer::io {
namespace {

constexpr std::string_view kTempMarker = ".tmp-";

std::string parent_dir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace

AtomicFile::AtomicFile(std::string final_path) : final_path_(std::move(final_path)) {
  const std::filesystem::path p(final_path_);
  PRIMER_CHECK(!p.filename().empty(), "AtomicFile: '{}' names no file", final_path_);
  temp_path_ = (p.parent_path() / fmt::format(".{}{}{}", p.filename().string(), kTempMarker, ::getpid())).string();
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  PRIMER_CHECK(fd_ >= 0, "cannot create '{}' (temporary for '{}'): {}", temp_path_, final_path_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());  // best effort: we may be unwinding from an error already
}

void AtomicFile::write(const void* data, size_t bytes) {
  PRIMER_CHECK(fd_ >= 0 && !committed_, "AtomicFile: write to '{}' after commit", final_path_);
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    PRIMER_CHECK(n > 0, "cannot write to '{}': {}", temp_path_, n < 0 ? std::strerror(errno) : "no progress");
    p += n;
    bytes -= size_t(n);
  }
}

void AtomicFile::commit() {
  PRIMER_CHECK(fd_ >= 0 && !committed_, "AtomicFile: '{}' committed twice", final_path_);
  PRIMER_CHECK(::fsync(fd_) == 0, "cannot flush '{}' to disk: {}", temp_path_, std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  PRIMER_CHECK(::close(fd) == 0, "cannot close '{}': {}", temp_path_, std::strerror(errno));
  PRIMER_CHECK(::rename(temp_path_.c_str(), final_path_.c_str()) == 0, "cannot rename '{}' to '{}': {}", temp_path_,
               final_path_, std::strerror(errno));
  committed_ = true;
  sync_directory(parent_dir(final_path_));
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
}

bool is_atomic_temp_name(std::string_view file_name) {
  return !file_name.empty() && file_name[0] == '.' && file_name.find(kTempMarker) != std::string_view::npos;
}

}  // namespace primer::io
