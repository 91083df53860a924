#include "core/io/durable_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/io/crc32c.h"

namespace primer::io {
namespace {

std::string errno_text() { return std::strerror(errno); }

// An open file descriptor, closed on scope exit (errors on explicit close() are reported).
class Fd {
 public:
  Fd(const std::string& path, int flags, mode_t mode = 0644) : path_(path), fd_(::open(path.c_str(), flags, mode)) {
    PRIMER_CHECK(fd_ >= 0, "cannot open '{}': {}", path, errno_text());
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void sync() const { PRIMER_CHECK(::fsync(fd_) == 0, "fsync of '{}' failed: {}", path_, errno_text()); }
  void close() {
    const int fd = fd_;
    fd_ = -1;
    PRIMER_CHECK(::close(fd) == 0, "close of '{}' failed: {}", path_, errno_text());
  }

 private:
  std::string path_;
  int fd_;
};

FileDigest digest_fd(const Fd& fd, const std::string& path) {
  std::vector<char> buffer(size_t(4) << 20);
  FileDigest d;
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    PRIMER_CHECK(n >= 0, "read of '{}' failed after {} bytes: {}", path, d.bytes, errno_text());
    if (n == 0) return d;
    d.crc32c = crc32c_update(d.crc32c, buffer.data(), size_t(n));
    d.bytes += uint64_t(n);
  }
}

}  // namespace

FileDigest digest_and_sync(const std::string& path) {
  Fd fd(path, O_RDONLY | O_CLOEXEC);
  const FileDigest d = digest_fd(fd, path);
  fd.sync();
  fd.close();
  return d;
}

FileDigest digest(const std::string& path) {
  Fd fd(path, O_RDONLY | O_CLOEXEC);
  return digest_fd(fd, path);
}

void write_file_synced(const std::string& path, std::string_view contents) {
  Fd fd(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC);
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd.get(), contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    PRIMER_CHECK(n > 0, "write of '{}' failed after {} of {} bytes: {}", path, done, contents.size(), errno_text());
    done += size_t(n);
  }
  fd.sync();
  fd.close();
}

void sync_directory(const std::string& path) {
  Fd fd(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  fd.sync();
  fd.close();
}

bool rename_directory_atomically(const std::string& from, const std::string& to) {
  // rename(2) replaces only an absent or empty `to`; a populated one needs the atomic swap.
  if (::rename(from.c_str(), to.c_str()) == 0) return false;
  PRIMER_CHECK(errno == ENOTEMPTY || errno == EEXIST, "cannot rename '{}' to '{}': {}", from, to, errno_text());
  PRIMER_CHECK(::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0,
               "cannot swap '{}' with the existing '{}': {}", from, to, errno_text());
  return true;
}

}  // namespace primer::io
