// The MPI backend: CPU tensors directly; GPU tensors (when several ranks share a GPU, which NCCL refuses)
// copied to page-locked host memory, moved by MPI, and copied back in Work::wait(). Every operation is a
// nonblocking MPI call completed in Work::wait(), which polls it until the timeout (fault_report.h).
#pragma once
#include <mpi.h>

#include <memory>

#include "parallel/comm/communicator.h"
#include "parallel/comm/fault_report.h"
#include "parallel/comm/pinned_host_pool.h"

namespace primer::parallel {

class MpiCommunicator final : public Communicator {
 public:
  // Takes a duplicate of `comm`, so its traffic never matches anyone else's. stage_gpu_tensors: also accept
  // CUDA tensors, host-staged (reported as "mpi (host-staged GPU)").
  MpiCommunicator(MPI_Comm comm, bool stage_gpu_tensors, CommOptions options);
  ~MpiCommunicator() override;

  std::string backend_name() const override { return stage_gpu_ ? "mpi (host-staged GPU)" : "mpi"; }
  std::unique_ptr<Communicator> split(int color, int key) override;

  // For the operations in flight: where to report a timeout.
  FaultContext fault_context() const;

 protected:
  Work start_all_reduce(const Tensor& tensor, ReduceOp op, const OpInfo& info) override;
  Work start_all_gather(const Tensor& shard, const Tensor& out, const OpInfo& info) override;
  Work start_reduce_scatter(const Tensor& in, const Tensor& shard, ReduceOp op, const OpInfo& info) override;
  Work start_broadcast(const Tensor& tensor, int root, const OpInfo& info) override;
  Work start_send_recv(const Tensor* send, int send_peer, const Tensor* recv, int recv_peer,
                       const OpInfo& info) override;
  Work start_all_to_all(const Tensor& in, const Tensor& out, const OpInfo& info) override;
  Work start_barrier(const OpInfo& info) override;
  bool serves(Device device) const override { return device.is_cpu() || stage_gpu_; }

 private:
  MpiCommunicator(MPI_Comm owned, MPI_Comm owned_monitor, bool stage_gpu_tensors, CommOptions options);

  MPI_Comm comm_ = MPI_COMM_NULL;     // the tensors' traffic
  MPI_Comm monitor_ = MPI_COMM_NULL;  // the arrival exchange after a timeout
  bool stage_gpu_ = false;
  std::shared_ptr<PinnedHostPool> staging_;  // the staging buffers of GPU tensors; null without them
};

int mpi_rank(MPI_Comm comm);
int mpi_size(MPI_Comm comm);

}  // namespace primer::parallel
