// This machine and its processes: what a file left by a process (a checkpoint being saved, a run's lock) needs to
// tell a live owner from a dead one.
#pragma once
#include <cstdint>
#include <string>

namespace primer {

// Whether a process with this id exists on this host (a process of another user counts as alive).
bool process_alive(int64_t pid);

// This host's name (gethostname), or "unknown-host" when it has none.
std::string host_name();

}  // namespace primer
