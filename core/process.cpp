#include "core/process.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace primer {

bool process_alive(int64_t pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno != ESRCH); }

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "unknown-host";
  return name;
}

}  // namespace primer
