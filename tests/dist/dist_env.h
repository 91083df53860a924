// What the dist tests share: the world communicators made once by the harness (MPI backend on CPU tensors, and
// for GPU tensors where there is a GPU), with a timeout short enough that a broken test ends the job instead of
// hanging CI.
#pragma once
#include "parallel/comm/communicator.h"

namespace primer::test {

parallel::Communicator& world_comm();
// For CUDA tensors on the local rank's GPU, made on first use (every rank runs the same tests, so every rank
// makes it at the same point); only call it where cuda::available().
parallel::Communicator& gpu_world_comm();
inline constexpr double kDistTestTimeoutSeconds = 30;

}  // namespace primer::test
