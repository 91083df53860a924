// A preempted or interrupted run (SIGTERM from a cluster scheduler, SIGINT from Ctrl-C) stops at a step boundary with
// a committed checkpoint instead of losing the work since the last one: the first signal is only recorded; the
// training loop finishes its step, every rank agrees, saves and exits 128 + signal. A second signal ends the process
// at once (the default action), for a run that must die now.
#pragma once

namespace primer::recipes {

class StopRequest {
 public:
  StopRequest();   // installs the SIGTERM and SIGINT handlers
  ~StopRequest();  // restores the previous ones
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // The signal received (SIGTERM or SIGINT), or 0.
  static int signal();
};

const char* signal_name(int signal);  // "SIGTERM", "SIGINT"

}  // namespace primer::recipes
