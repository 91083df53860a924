#include "recipes/stop_request.h"

#include <signal.h>

#include <csignal>

namespace primer::recipes {
namespace {

volatile std::sig_atomic_t received = 0;
struct sigaction previous_term, previous_int;

void on_signal(int sig) {
  if (received != 0) {  // the second signal: die now, as if no handler were installed
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  received = sig;
}

}  // namespace

StopRequest::StopRequest() {
  received = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &previous_term);
  sigaction(SIGINT, &action, &previous_int);
}

StopRequest::~StopRequest() {
  sigaction(SIGTERM, &previous_term, nullptr);
  sigaction(SIGINT, &previous_int, nullptr);
  received = 0;
}

int StopRequest::signal() { return received; }

const char* signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal"; }

}  // namespace primer::recipes
