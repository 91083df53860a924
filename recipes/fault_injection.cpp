#include "recipes/fault_injection.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/check.h"

namespace primer::recipes {

bool fault_here_if_asked(const char* point, int64_t step, int rank) {
  const char* spec = std::getenv("PRIMER_FAULT");
  if (!spec) return false;
  int want_rank = -1;
  long long want_step = -1;
  char want_point[32] = {}, action[16] = {};
  const bool parsed = std::sscanf(spec, "%d:%31[a-z]:%lld:%15[a-z]", &want_rank, want_point, &want_step, action) == 4;
  const std::string what = action;
  PRIMER_CHECK(parsed && (what == "kill" || what == "hang" || what == "term" || what == "nan"),
               "PRIMER_FAULT='{}': expected <rank>:<step|checkpoint>:<step>:<kill|hang|term|nan>", spec);
  if (want_rank != rank || want_step != step || std::string(want_point) != point) return false;
  if (what == "nan") return true;  // the caller poisons its gradient
  std::fprintf(stderr, "[rank %d] PRIMER_FAULT: %s this rank at %s of step %lld\n", rank,
               what == "kill"   ? "killing"
               : what == "hang" ? "stopping"
                                : "sending SIGTERM to",
               point, static_cast<long long>(step));
  std::fflush(stderr);
  ::raise(what == "kill" ? SIGKILL : what == "hang" ? SIGSTOP : SIGTERM);
  return false;
}

}  // namespace primer::recipes
