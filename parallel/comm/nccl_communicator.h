// The NCCL backend (CUDA builds with NCCL): GPU tensors on this rank's device, one NCCL communicator per
// Communicator, bootstrapped by broadcasting rank 0's unique id over MPI. Collectives run on a communication
// stream of their own, after the work already queued on the compute stream; Work::wait() makes the compute
// stream wait for the collective's completion event without blocking the host. A watchdog thread follows the
// operations' completion (CompletionCounter: no CUDA call) and a poller asks ncclCommGetAsyncError: a collective
// unfinished for longer than the timeout, or an asynchronous NCCL error, aborts the NCCL communicator and ends the
// job with a report (fault_report.h).
#pragma once
#ifdef PRIMER_WITH_NCCL
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/comm/completion_counter.h"
#include "parallel/comm/fault_report.h"

namespace primer::parallel {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (MPI_COMM_NULL: a single process); the current CUDA device is this rank's,
  // and no other rank of `bootstrap` may use it (NCCL refuses duplicate devices: the factory checks).
  NcclCommunicator(MPI_Comm bootstrap, CommOptions options);
  ~NcclCommunicator() override;

  std::string backend_name() const override { return "nccl"; }
  std::unique_ptr<Communicator> split(int color, int key) override;

 protected:
  Work start_all_reduce(const Tensor& tensor, ReduceOp op, const OpInfo& info) override;
  Work start_all_gather(const Tensor& shard, const Tensor& out, const OpInfo& info) override;
  Work start_reduce_scatter(const Tensor& in, const Tensor& shard, ReduceOp op, const OpInfo& info) override;
  Work start_broadcast(const Tensor& tensor, int root, const OpInfo& info) override;
  Work start_send_recv(const Tensor* send, int send_peer, const Tensor* recv, int recv_peer,
                       const OpInfo& info) override;
  Work start_all_to_all(const Tensor& in, const Tensor& out, const OpInfo& info) override;
  Work start_barrier(const OpInfo& info) override;
  bool serves(Device device) const override { return device.is_cuda() && device.index == device_; }

 private:
  struct Event;  // a CUDA event destroyed with its last owner
  struct InFlight {
    OpInfo info;
    uint64_t index;  // this communicator's count of operations launched, the value completion_ reaches after it
    std::chrono::steady_clock::time_point started;  // launched, or when the operation before it finished if later
  };

  struct Bootstrap {
    ncclComm_t comm;
    MPI_Comm mpi;  // owned duplicate of the bootstrap communicator
  };
  static Bootstrap bootstrapped(MPI_Comm bootstrap);
  NcclCommunicator(Bootstrap parts, int device, CommOptions options);
  NcclCommunicator(ncclComm_t comm, MPI_Comm owned_mpi, int device, CommOptions options);
  // Orders the communication stream after the compute stream, runs `enqueue` (the NCCL calls) on it,
  // records completion and hands it to the watchdog. host_blocking: wait() also blocks the host (barrier).
  template <class Enqueue>
  Work launch(const OpInfo& info, std::vector<Tensor> tensors, Enqueue&& enqueue, bool host_blocking = false);
  // Two threads watch the operations in flight. The watchdog retires finished operations by reading completion_ and
  // times out the oldest unfinished one, with no CUDA or NCCL call that could block it (the host thread can sit in a
  // blocking CUDA call behind the hung collective, or inside an enqueue); the poller asks NCCL for asynchronous
  // errors.
  void poll();
  void watch();
  void release();  // destroys the NCCL communicator, stream and MPI communicators; idempotent
  FaultContext fault_context() const;

  ncclComm_t comm_ = nullptr;
  MPI_Comm mpi_ = MPI_COMM_NULL;      // bootstrap of splits and the arrival exchange; null for a single process
  MPI_Comm monitor_ = MPI_COMM_NULL;  // the arrival exchange's own traffic
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  int finalizer_id_ = -1;
  Tensor barrier_scratch_;

  std::unique_ptr<CompletionCounter> completion_;
  std::mutex mutex_;
  std::deque<InFlight> in_flight_;
  uint64_t launched_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread poller_, watchdog_;
};

}  // namespace primer::parallel
#endif
