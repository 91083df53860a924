// What a rank does when a collective outlives its timeout: find out, as far as it can, which ranks did not
// arrive, say so on stderr, and end the whole job non-zero. A hung peer is invisible to mpirun (only exits
// are), so without this every other rank would wait forever.
//
// The arrival exchange runs on a communicator of its own (a duplicate of the collective's): each timed-out
// rank sends every peer the sequence number it is stuck at and listens for theirs during a grace period.
// Ranks waiting in the same collective time out too and answer; a rank that never answers is hung, busy
// outside communication, or dead; one that answers with an older sequence number is stuck further back.
#pragma once
#include <mpi.h>

#include <functional>
#include <string>
#include <string_view>

#include "parallel/comm/communicator.h"

namespace primer::parallel {

struct FaultContext {
  MPI_Comm monitor = MPI_COMM_NULL;  // MPI_COMM_NULL: a single process, nothing to ask
  int rank = 0;
  int size = 1;
  std::string backend;
  double timeout_seconds = 0;
};

// Prints the report, runs abort_backend (ncclCommAbort) and ends the job with MPI_Abort (or exits 1 without MPI).
[[noreturn]] void abort_on_timeout(const FaultContext& where, const OpInfo& info,
                                   const std::function<void()>& abort_backend = {});

// For failures other than timeouts that leave a communicator unusable (NCCL asynchronous errors).
[[noreturn]] void abort_on_error(const FaultContext& where, const OpInfo& info, std::string_view error,
                                 const std::function<void()>& abort_backend = {});

}  // namespace primer::parallel
