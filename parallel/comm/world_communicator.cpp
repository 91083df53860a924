#include "parallel/comm/world_communicator.h"

#include <mpi.h>

#include <array>
#include <cstring>
#include <set>
#include <vector>

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

namespace {

// The current GPU's UUID, or all zeros without one. Ranks compare UUIDs rather than count devices, so that a
// launcher giving each rank one visible device (CUDA_VISIBLE_DEVICES, srun --gpus-per-task) is told apart
// from ranks that really share a GPU.
std::array<char, 16> current_gpu_uuid() {
  std::array<char, 16> uuid{};
#ifdef PRIMER_WITH_CUDA
  if (cuda::available()) {
    cudaDeviceProp properties;
    PRIMER_CUDA_CHECK(cudaGetDeviceProperties(&properties, cuda::current_device()));
    std::memcpy(uuid.data(), properties.uuid.bytes, uuid.size());
  }
#endif
  return uuid;
}

}  // namespace

bool every_rank_has_its_own_gpu() {
  const World& w = world();
  std::array<char, 16> mine = current_gpu_uuid();
  std::vector<std::array<char, 16>> all(size_t(w.size), mine);
  if (w.mpi) PRIMER_MPI_CHECK(MPI_Allgather(mine.data(), 16, MPI_BYTE, all.data(), 16, MPI_BYTE, MPI_COMM_WORLD));
  const std::array<char, 16> none{};
  std::set<std::array<char, 16>> distinct(all.begin(), all.end());
  return distinct.size() == all.size() && !distinct.contains(none);
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
    why = own_gpus ? "built without NCCL" : "ranks share a GPU, which NCCL refuses";
  }
  if (!w.mpi) {
    why = "a single process, no launcher";
    return std::make_unique<SelfCommunicator>(options);
  }
  if (device.is_cpu()) why = "CPU tensors";
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, device.is_cuda(), options);
}

}  // namespace

std::unique_ptr<Communicator> make_world_communicator(Device device, CommOptions options, bool announce) {
  PRIMER_CHECK(options.timeout_seconds > 0, "collective timeout must be > 0 seconds (got {})", options.timeout_seconds);
  std::string why;
  std::unique_ptr<Communicator> comm = choose(device, options, why);
  if (announce)
    console::info("communicator: {} over {} rank(s) for {} tensors ({}); collective timeout {} s", comm->backend_name(),
                  comm->size(), device.str(), why, options.timeout_seconds);
  return comm;
}

}  // namespace primer::parallel
