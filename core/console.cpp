#include "core/console.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace primer::console {
namespace {

int g_rank = 0;
int g_world_size = 1;

// Every line gets the rank prefix, so a multi-line message stays attributable after ranks' output mixes.
std::string prefixed(std::string_view severity, std::string_view message) {
  if (!message.empty() && message.back() == '\n') message.remove_suffix(1);  // the line ends here anyway
  std::string prefix = g_world_size > 1 ? fmt::format("[rank {}] ", g_rank) : std::string();
  std::string out;
  size_t start = 0;
  bool first = true;
  while (start <= message.size()) {
    size_t end = message.find('\n', start);
    if (end == std::string_view::npos) end = message.size();
    out += prefix;
    if (first) out += severity;
    out.append(message.substr(start, end - start));
    out += '\n';
    first = false;
    start = end + 1;
    if (end == message.size()) break;
  }
  return out;
}

// One write() per message: POSIX keeps it contiguous on a pipe, so ranks' lines do not interleave mid-line.
void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;  // nowhere left to report to
    done += size_t(n);
  }
}

}  // namespace

void set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world_size = world_size;
}
int rank() { return g_rank; }
int world_size() { return g_world_size; }

void silence_stdout_off_rank0() {
  if (g_rank == 0) return;
  std::fflush(stdout);
  int null_fd = ::open("/dev/null", O_WRONLY);
  if (null_fd < 0) return;  // stdout stays as it was: noisier, not wrong
  ::dup2(null_fd, STDOUT_FILENO);
  ::close(null_fd);
}

void write_info(std::string_view message) {
  if (g_rank != 0) return;
  std::fflush(stdout);
  write_all(STDOUT_FILENO, std::string(message) + "\n");
}

void write_warning(std::string_view message) {
  std::fflush(stderr);
  write_all(STDERR_FILENO, prefixed("warning: ", message));
}

void write_error(std::string_view message) {
  std::fflush(stderr);
  write_all(STDERR_FILENO, prefixed("error: ", message));
}

}  // namespace primer::console
