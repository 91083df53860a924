#include "parallel/comm/mpi_communicator.h"

#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "core/check.h"
#include "parallel/comm/mpi_util.h"

namespace primer::parallel {

int mpi_rank(MPI_Comm comm) {
  int r = 0;
  PRIMER_MPI_CHECK(MPI_Comm_rank(comm, &r));
  return r;
}

int mpi_size(MPI_Comm comm) {
  int s = 0;
  PRIMER_MPI_CHECK(MPI_Comm_size(comm, &s));
  return s;
}

namespace {

MPI_Comm duplicate(MPI_Comm comm) {
  MPI_Comm dup;
  PRIMER_MPI_CHECK(MPI_Comm_dup(comm, &dup));
  return dup;
}

// One operation in flight: its MPI requests, the tensors they read and write (kept alive until done), and
// for GPU tensors the page-locked host copies that MPI moves instead, copied back in wait().
class MpiPending final : public PendingOp {
 public:
  MpiPending(FaultContext where, OpInfo info, std::shared_ptr<PinnedHostPool> staging)
      : where_(std::move(where)), info_(std::move(info)), staging_(std::move(staging)) {}

  // The host memory MPI reads.
  void* input(const Tensor& t) {
#ifdef PRIMER_WITH_CUDA
    if (t.is_cuda()) return hold(staging_->stage_in(t));
#endif
    keep_alive_.push_back(t);
    return t.data_ptr();
  }
  // The host memory MPI writes; for a GPU tensor it is copied back in wait() and, when the operation also
  // reads the tensor (in-place reductions, the broadcast root), it starts with the tensor's values.
  void* output(const Tensor& t, [[maybe_unused]] bool reads_too) {  // used only where GPU tensors exist
#ifdef PRIMER_WITH_CUDA
    if (t.is_cuda()) {
      void* host = hold(reads_too ? staging_->stage_in(t) : staging_->lease(t.nbytes()));
      copy_back_.emplace_back(t, host);
      return host;
    }
#endif
    keep_alive_.push_back(t);
    return t.data_ptr();
  }
  MPI_Request* new_request() {
    requests_.push_back(MPI_REQUEST_NULL);
    return &requests_.back();
  }
  void reserve_requests(size_t n) { requests_.reserve(n); }  // new_request() hands out stable pointers

  void wait() override {
    using clock = std::chrono::steady_clock;
    auto deadline = clock::now() + std::chrono::duration<double>(where_.timeout_seconds);
    // Poll rather than block in MPI_Waitall, so a hung peer cannot hold this rank forever. Sleeping between
    // polls leaves the cores to the other ranks when they are oversubscribed (CI runs 4 ranks on 2 cores).
    for (int polls = 0;; ++polls) {
      int done = 0;
      PRIMER_MPI_CHECK(MPI_Testall(int(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE));
      if (done) break;
      if (clock::now() > deadline) abort_on_timeout(where_, info_);
      if (polls > 64) std::this_thread::sleep_for(std::chrono::microseconds(polls > 1000 ? 1000 : 50));
    }
#ifdef PRIMER_WITH_CUDA
    for (auto& [device_tensor, host] : copy_back_) PinnedHostPool::stage_out(host, device_tensor);
#endif
  }

 private:
  FaultContext where_;
  OpInfo info_;
  std::shared_ptr<PinnedHostPool> staging_;  // null where no GPU tensors are staged
  std::vector<MPI_Request> requests_;
  std::vector<Tensor> keep_alive_;
#ifdef PRIMER_WITH_CUDA
  void* hold(std::shared_ptr<void> buffer) {
    leases_.push_back(std::move(buffer));
    return leases_.back().get();
  }
  std::vector<std::shared_ptr<void>> leases_;
  std::vector<std::pair<Tensor, void*>> copy_back_;
#endif
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool stage_gpu_tensors, CommOptions options)
    : MpiCommunicator(duplicate(comm), duplicate(comm), stage_gpu_tensors, options) {}

MpiCommunicator::MpiCommunicator(MPI_Comm owned, MPI_Comm owned_monitor, bool stage_gpu_tensors, CommOptions options)
    : Communicator(mpi_rank(owned), mpi_size(owned), options),
      comm_(owned),
      monitor_(owned_monitor),
      stage_gpu_(stage_gpu_tensors) {
#ifdef PRIMER_WITH_CUDA
  if (stage_gpu_) staging_ = std::make_shared<PinnedHostPool>();
#endif
}

MpiCommunicator::~MpiCommunicator() {
  if (!mpi::initialized()) return;  // MPI_Finalize already released every communicator
  MPI_Comm_free(&monitor_);
  MPI_Comm_free(&comm_);
}

FaultContext MpiCommunicator::fault_context() const {
  return FaultContext{monitor_, rank(), size(), backend_name(), timeout_seconds()};
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  PRIMER_CHECK(color >= 0, "rank {}: split: color {} must be >= 0", rank(), color);
  barrier("split");  // MPI_Comm_split cannot time out: first make sure every rank has come this far
  MPI_Comm part;
  PRIMER_MPI_CHECK(MPI_Comm_split(comm_, color, key, &part));
  return std::unique_ptr<Communicator>(new MpiCommunicator(part, duplicate(part), stage_gpu_, options()));
}

Work MpiCommunicator::start_all_reduce(const Tensor& tensor, ReduceOp op, const OpInfo& info) {
  auto p = std::make_unique<MpiPending>(fault_context(), info, staging_);
  void* buf = p->output(tensor, /*reads_too=*/true);
  PRIMER_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, mpi::count(tensor.numel(), info), mpi::datatype(tensor.dtype()),
                                  mpi::reduction(op, tensor.dtype()), comm_, p->new_request()));
  return Work(std::move(p));
}

Work MpiCommunicator::start_all_gather(const Tensor& shard, const Tensor& out, const OpInfo& info) {
  auto p = std::make_unique<MpiPending>(fault_context(), info, staging_);
  MPI_Datatype type = mpi::datatype(shard.dtype());
  int n = mpi::count(shard.numel(), info);
  mpi::count(out.numel(), info);
  void* src = p->input(shard);
  void* dst = p->output(out, false);
  PRIMER_MPI_CHECK(MPI_Iallgather(src, n, type, dst, n, type, comm_, p->new_request()));
  return Work(std::move(p));
}

Work MpiCommunicator::start_reduce_scatter(const Tensor& in, const Tensor& shard, ReduceOp op, const OpInfo& info) {
  auto p = std::make_unique<MpiPending>(fault_context(), info, staging_);
  mpi::count(in.numel(), info);
  void* src = p->input(in);
  void* dst = p->output(shard, false);
  PRIMER_MPI_CHECK(MPI_Ireduce_scatter_block(src, dst, mpi::count(shard.numel(), info), mpi::datatype(in.dtype()),
                                             mpi::reduction(op, in.dtype()), comm_, p->new_request()));
  return Work(std::move(p));
}

Work MpiCommunicator::start_broadcast(const Tensor& tensor, int root, const OpInfo& info) {
  auto p = std::make_unique<MpiPending>(fault_context(), info, staging_);
  void* buf = p->output(tensor, /*reads_too=*/rank() == root);
  PRIMER_MPI_CHECK(
      MPI_Ibcast(buf, mpi::count(tensor.numel(), info), mpi::datatype(tensor.dtype()), root, comm_, p->new_request()));
  return Work(std::move(p));
}

Work MpiCommunicator::start_send_recv(const Tensor* send, int send_peer, const Tensor* recv, int recv_peer,
                                      const OpInfo& info) {
  constexpr int kTag = 0;  // MPI keeps messages between two ranks in order, so one tag serves every pair
  auto p = std::make_unique<MpiPending>(fault_context(), info, staging_);
  p->reserve_requests(2);
  // The receive is posted first so that a ring of send_recv calls never waits on an unposted receive.
  if (recv)
    PRIMER_MPI_CHECK(MPI_Irecv(p->output(*recv, false), mpi::count(recv->numel(), info), mpi::datatype(recv->dtype()),
                               recv_peer, kTag, comm_, p->new_request()));
  if (send)
    PRIMER_MPI_CHECK(MPI_Isend(p->input(*send), mpi::count(send->numel(), info), mpi::datatype(send->dtype()),
                               send_peer, kTag, comm_, p->new_request()));
  return Work(std::move(p));
}

Work MpiCommunicator::start_all_to_all(const Tensor& in, const Tensor& out, const OpInfo& info) {
  auto p = std::make_unique<MpiPending>(fault_context(), info, staging_);
  MPI_Datatype type = mpi::datatype(in.dtype());
  int chunk = mpi::count(in.numel() / size(), info);
  mpi::count(in.numel(), info);
  void* src = p->input(in);
  void* dst = p->output(out, false);
  PRIMER_MPI_CHECK(MPI_Ialltoall(src, chunk, type, dst, chunk, type, comm_, p->new_request()));
  return Work(std::move(p));
}

Work MpiCommunicator::start_barrier(const OpInfo& info) {
  auto p = std::make_unique<MpiPending>(fault_context(), info, staging_);
  PRIMER_MPI_CHECK(MPI_Ibarrier(comm_, p->new_request()));
  return Work(std::move(p));
}

}  // namespace primer::parallel
