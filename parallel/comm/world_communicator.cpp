#include "parallel/comm/world_communicator.h"

#include <mpi.h>

#include "core/check.h"
#include "core/console.h"
#include "core/cuda_runtime.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/comm/mpi_util.h"
#include "parallel/comm/nccl_communicator.h"
#include "parallel/comm/self_communicator.h"

namespace primer::parallel {

bool nccl_compiled() {
#ifdef PRIMER_WITH_NCCL
  return true;
#else
  return false;
#endif
}

bool every_rank_has_its_own_gpu() {
  const World& w = world();
  int mine = cuda::available() && w.local_size <= cuda::device_count() ? 1 : 0;
  int all = mine;
  if (w.mpi) PRIMER_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  return all == 1;
}

namespace {

std::unique_ptr<Communicator> choose(Device device, CommOptions options, std::string& why) {
  const World& w = world();
  if (device.is_cuda()) {
    PRIMER_CHECK(cuda::available(), "rank {}: a communicator for {} needs a GPU, and this rank has none", w.rank,
                 device.str());
    PRIMER_CHECK(cuda::current_device() == device.index,
                 "rank {}: a communicator for {} must be made with that device current (now cuda:{}; "
                 "select_local_gpu() makes the local rank's GPU current)",
                 w.rank, device.str(), cuda::current_device());
    bool own_gpus = every_rank_has_its_own_gpu();
#ifdef PRIMER_WITH_NCCL
    if (own_gpus) {
      why = "one GPU per rank";
      return std::make_unique<NcclCommunicator>(w.mpi ? MPI_COMM_WORLD : MPI_COMM_NULL, options);
    }
#endif
    why = own_gpus ? "built without NCCL" : fmt::format("{} ranks share {} GPU(s) on a node, which NCCL refuses",
                                                         w.local_size, cuda::device_count());
  }
  if (!w.mpi) {
    why = "a single process, no launcher";
    return std::make_unique<SelfCommunicator>(options);
  }
  if (device.is_cpu()) why = "CPU tensors";
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, device.is_cuda(), options);
}

}  // namespace

std::unique_ptr<Communicator> make_world_communicator(Device device, CommOptions options) {
  PRIMER_CHECK(options.timeout_seconds > 0, "collective timeout must be > 0 seconds (got {})",
               options.timeout_seconds);
  std::string why;
  std::unique_ptr<Communicator> comm = choose(device, options, why);
  console::info("communicator: {} over {} rank(s) for {} tensors ({}); collective timeout {} s", comm->backend_name(),
                comm->size(), device.str(), why, options.timeout_seconds);
  return comm;
}

}  // namespace primer::parallel
