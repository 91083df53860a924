// Who may use a run directory (output_dir): one run at a time, through a lock file that rank 0 holds for the whole
// run; and a fresh run only where no other run's checkpoints are (they would be resumed, rotated or exported as this
// run's), unless the recipe sets overwrite_output_dir.
#pragma once
#include <string>

#include "parallel/comm/communicator.h"
#include "recipes/checkpoint.h"

namespace primer::recipes {

inline constexpr const char* kRunLockName = ".primer-run.lock";

// Holds <output_dir>/.primer-run.lock ("<host> <pid>") while it lives; output_dir must exist. A lock of a live
// process, or of any process on another host, is an error naming that host and pid; one left by a dead process of
// this host (a killed run) is taken over, saying so on stderr.
class RunDirectoryLock {
 public:
  explicit RunDirectoryLock(const std::string& output_dir);
  ~RunDirectoryLock();  // removes the lock if it is still this process's
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

 private:
  std::string path_, holder_;
};

// Before a fresh run (nothing to resume) writes anything: checkpoints in `checkpoints`' directory are refused, naming
// them, unless `overwrite` (the recipe's overwrite_output_dir, set at `where`), in which case rank 0 removes them once
// every rank has looked. Collective over `ranks`.
void prepare_fresh_run(const CheckpointManager& checkpoints, bool overwrite, const std::string& where,
                       parallel::Communicator& ranks);

}  // namespace primer::recipes
