// The communicator over every rank of the job, on the backend that can serve `device`:
// - CUDA, each rank with a GPU of its own, NCCL built: NCCL;
// - CUDA otherwise (several ranks share a GPU, which NCCL refuses, or no NCCL): MPI with host staging;
// - CPU: MPI;
// - a process no launcher started (world size 1, MPI never initialised): NCCL for CUDA where built, else "self".
// Rank 0 logs the choice in one line (unless not `announce`: a command whose stdout is its result). Call init_world
// (launch.h) first, and for CUDA select_local_gpu.
#pragma once
#include <memory>

#include "core/device.h"
#include "parallel/comm/communicator.h"

namespace primer::parallel {

std::unique_ptr<Communicator> make_world_communicator(Device device, CommOptions options = {}, bool announce = true);

// Whether NCCL can serve this job's GPU tensors: every rank's current GPU is a different device (compared by
// UUID; NCCL refuses two ranks on one device). Collective over the world when MPI runs.
bool every_rank_has_its_own_gpu();

bool nccl_compiled();

}  // namespace primer::parallel
