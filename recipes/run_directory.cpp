#include "recipes/run_directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/check.h"
#include "core/console.h"
#include "core/process.h"
#include "recipes/checkpoint_layout.h"

namespace primer::recipes {
namespace fs = std::filesystem;
namespace {

struct Holder {
  std::string host;
  int64_t pid = 0;
  std::string text;  // the file's bytes, to tell this holder's lock from a newer one
};

// The lock's holder; nothing when the file is gone (released meanwhile).
std::optional<Holder> read_holder(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  Holder h{"", 0, bytes.str()};
  std::istringstream fields(h.text);
  fields >> h.host >> h.pid;  // a torn or foreign file leaves pid 0: never taken over, reported as is
  return h;
}

// Creates the lock with O_EXCL: exactly one of several starting runs succeeds.
bool create_exclusive(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    PRIMER_CHECK(errno == EEXIST, "cannot create the run lock '{}': {}", path, std::strerror(errno));
    return false;
  }
  const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  ::close(fd);
  if (!written) ::unlink(path.c_str());
  PRIMER_CHECK(written, "cannot write the run lock '{}': {}", path, std::strerror(errno));
  return true;
}

[[noreturn]] void fail_in_use(const std::string& path, const Holder& h) {
  PRIMER_FAIL(
      "output_dir '{}' is in use by another run: process {} on host {} holds '{}'. Wait for it to end, or use "
      "another output_dir; if that run is gone (it ran on another host, or its pid was reused), remove the "
      "lock file",
      fs::path(path).parent_path().string(), h.pid, h.host.empty() ? "?" : h.host, path);
}

}  // namespace

RunDirectoryLock::RunDirectoryLock(const std::string& output_dir)
    : path_((fs::path(output_dir) / kRunLockName).string()),
      holder_(fmt::format("{} {}\n", host_name(), int64_t(::getpid()))) {
  const std::string host = host_name();
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (create_exclusive(path_, holder_)) return;
    const std::optional<Holder> h = read_holder(path_);
    if (!h) continue;  // released between the two calls
    if (h->host != host || h->pid <= 0 || process_alive(h->pid)) fail_in_use(path_, *h);
    // Stale: move it aside atomically, so that of several runs taking it over only one removes it.
    const std::string aside = fmt::format("{}.stale-{}", path_, int64_t(::getpid()));
    if (::rename(path_.c_str(), aside.c_str()) != 0) continue;
    const std::optional<Holder> moved = read_holder(aside);
    if (moved && moved->text != h->text) {  // a new holder's lock: put it back (link never replaces) and yield
      [[maybe_unused]] const int relinked = ::link(aside.c_str(), path_.c_str());  // fails if a third run holds it
      ::unlink(aside.c_str());
      fail_in_use(path_, *moved);
    }
    ::unlink(aside.c_str());
    console::warn("taking over the run lock '{}' of process {} on this host, which is no longer running (a killed run)",
                  path_, h->pid);
  }
  PRIMER_FAIL("cannot take the run lock '{}': it kept changing hands", path_);
}

RunDirectoryLock::~RunDirectoryLock() {
  const std::optional<Holder> h = read_holder(path_);
  if (h && h->text == holder_) ::unlink(path_.c_str());
}

void prepare_fresh_run(const CheckpointManager& checkpoints, bool overwrite, const std::string& where,
                       parallel::Communicator& ranks) {
  const auto found = checkpoint_layout::checkpoint_dirs(checkpoints.output_dir());
  if (found.empty()) return;
  std::string names;
  for (const auto& [step, path] : found) names += (names.empty() ? "" : ", ") + path.filename().string();
  PRIMER_CHECK(
      overwrite,
      "output_dir '{}' holds checkpoints of another run ({}) and this run starts fresh (resume_from_checkpoint "
      "is unset, or none of them can be resumed): resume it with resume_from_checkpoint: auto, choose another "
      "output_dir, or set overwrite_output_dir: true to remove them",
      checkpoints.output_dir(), names);
  ranks.barrier("fresh run: checkpoints looked for");
  if (ranks.rank() != 0) return;
  console::warn("overwrite_output_dir ({}): removing the checkpoints of the previous run in '{}': {}", where,
                checkpoints.output_dir(), names);
  checkpoints.remove_all();
}

}  // namespace primer::recipes
