// What the dist tests share: the world communicator made once by the harness's main (MPI backend on CPU
// tensors, a timeout short enough that a broken test ends the job instead of hanging CI).
#pragma once
#include "parallel/comm/communicator.h"

namespace primer::test {

parallel::Communicator& world_comm();
inline constexpr double kDistTestTimeoutSeconds = 30;

}  // namespace primer::test
