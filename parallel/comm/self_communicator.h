// The communicator of a job that no launcher started: one rank, no MPI. Reductions and broadcasts leave the
// tensor as it is; gathers, scatters and exchanges are copies. It lets `primer train` run the same parallel
// code on a single process without initialising MPI.
#pragma once
#include "parallel/comm/communicator.h"

namespace primer::parallel {

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(CommOptions options) : Communicator(0, 1, options) {}

  std::string backend_name() const override { return "self"; }
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
  bool serves(Device) const override { return true; }
};

}  // namespace primer::parallel
