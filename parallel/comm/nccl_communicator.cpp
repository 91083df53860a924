#ifdef PRIMER_WITH_NCCL
#include "parallel/comm/nccl_communicator.h"

#include <algorithm>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/comm/mpi_util.h"

#define PRIMER_NCCL_CHECK(expr)                                                                                        \
  do {                                                                                                                 \
    ncclResult_t primer_nccl_rc_ = (expr);                                                                             \
    if (primer_nccl_rc_ != ncclSuccess)                                                                                \
      ::primer::throw_error(                                                                                           \
          __FILE__, __LINE__,                                                                                          \
          ::fmt::format("{} failed: {} ({})", #expr, ncclGetErrorString(primer_nccl_rc_), ncclGetLastError(nullptr))); \
  } while (0)

namespace primer::parallel {

struct NcclCommunicator::Event {
  cudaEvent_t event = nullptr;
  Event() { PRIMER_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming)); }
  ~Event() { cudaEventDestroy(event); }  // unchecked: destructors must not throw, and nothing is left to do
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    default: PRIMER_FAIL("NCCL: no datatype for {}", dtype_name(dtype));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : op == ReduceOp::Max ? ncclMax : ncclMin; }

ncclComm_t init_comm(MPI_Comm bootstrap) {  // bootstrap: MPI_COMM_NULL for a single process
  int rank = bootstrap == MPI_COMM_NULL ? 0 : mpi_rank(bootstrap);
  int size = bootstrap == MPI_COMM_NULL ? 1 : mpi_size(bootstrap);
  ncclUniqueId id;
  if (rank == 0) PRIMER_NCCL_CHECK(ncclGetUniqueId(&id));
  if (size > 1) PRIMER_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, bootstrap));
  ncclComm_t comm;
  PRIMER_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  return comm;
}

MPI_Comm duplicate_or_null(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return MPI_COMM_NULL;
  MPI_Comm dup;
  PRIMER_MPI_CHECK(MPI_Comm_dup(comm, &dup));
  return dup;
}

int comm_rank(ncclComm_t comm) {
  int r = 0;
  PRIMER_NCCL_CHECK(ncclCommUserRank(comm, &r));
  return r;
}

int comm_size(ncclComm_t comm) {
  int n = 0;
  PRIMER_NCCL_CHECK(ncclCommCount(comm, &n));
  return n;
}

// The compute stream continues once the collective is done; the host blocks only for a barrier (polling, so
// the watchdog's timeout still applies).
class NcclPending final : public PendingOp {
 public:
  // event_owner keeps `done` alive (the watchdog shares it).
  NcclPending(std::shared_ptr<const void> event_owner, cudaEvent_t done, std::vector<Tensor> tensors,
              bool host_blocking)
      : event_owner_(std::move(event_owner)),
        done_(done),
        tensors_(std::move(tensors)),
        host_blocking_(host_blocking) {}
  void wait() override {
    PRIMER_CUDA_CHECK(cudaStreamWaitEvent(cuda::stream(), done_, 0));
    while (host_blocking_) {
      cudaError_t state = cudaEventQuery(done_);
      if (state == cudaSuccess) break;
      if (state != cudaErrorNotReady) PRIMER_CUDA_CHECK(state);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    tensors_.clear();  // later frees are ordered on the compute stream, after the wait just queued
  }

 private:
  std::shared_ptr<const void> event_owner_;
  cudaEvent_t done_;
  std::vector<Tensor> tensors_;
  bool host_blocking_;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm bootstrap, CommOptions options)
    : NcclCommunicator(bootstrapped(bootstrap), cuda::current_device(), options) {}

// Both steps are collective over `bootstrap`: one function fixes their order on every rank.
NcclCommunicator::Bootstrap NcclCommunicator::bootstrapped(MPI_Comm bootstrap) {
  MPI_Comm own = duplicate_or_null(bootstrap);
  return Bootstrap{init_comm(own), own};
}

NcclCommunicator::NcclCommunicator(Bootstrap parts, int device, CommOptions options)
    : NcclCommunicator(parts.comm, parts.mpi, device, options) {}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, MPI_Comm owned_mpi, int device, CommOptions options)
    : Communicator(comm_rank(comm), comm_size(comm), options), comm_(comm), mpi_(owned_mpi), device_(device) {
  int thread_level = MPI_THREAD_SINGLE;
  if (mpi_ != MPI_COMM_NULL) PRIMER_MPI_CHECK(MPI_Query_thread(&thread_level));
  // The watchdog reports from its own thread: the arrival exchange needs MPI_THREAD_MULTIPLE.
  if (thread_level == MPI_THREAD_MULTIPLE) monitor_ = duplicate_or_null(mpi_);
  PRIMER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  barrier_scratch_ = Tensor::zeros({1}, DType::F32, Device::cuda(device_));
  completion_ = std::make_unique<CompletionCounter>();
  finalizer_id_ = at_finalize([this] { release(); });
  poller_ = std::thread([this] { poll(); });
  watchdog_ = std::thread([this] { watch(); });
}

NcclCommunicator::~NcclCommunicator() {
  cancel_at_finalize(finalizer_id_);
  release();
}

void NcclCommunicator::release() {
  if (!comm_) return;
  stopping_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  if (poller_.joinable()) poller_.join();
  // Unchecked: called from destructors and at finalize, where there is nobody left to report to.
  cudaStreamSynchronize(stream_);
  ncclCommDestroy(comm_);
  comm_ = nullptr;
  cudaStreamDestroy(stream_);
  if (mpi::initialized()) {
    if (monitor_ != MPI_COMM_NULL) MPI_Comm_free(&monitor_);
    if (mpi_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_);
  }
}

FaultContext NcclCommunicator::fault_context() const {
  return FaultContext{monitor_, rank(), size(), backend_name(), timeout_seconds()};
}

// Any failure here ends the job: the poller is the only one looking, and nobody would catch an exception.
void NcclCommunicator::poll() {
  while (!stopping_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ncclResult_t async_error = ncclSuccess;
    ncclResult_t queried = ncclCommGetAsyncError(comm_, &async_error);
    if (queried == ncclSuccess && (async_error == ncclSuccess || async_error == ncclInProgress)) continue;
    OpInfo oldest;
    {
      std::lock_guard lock(mutex_);
      if (!in_flight_.empty()) oldest = in_flight_.front().info;
    }
    abort_on_error(
        fault_context(), oldest,
        fmt::format("NCCL asynchronous error: {}", ncclGetErrorString(queried != ncclSuccess ? queried : async_error)),
        [this] { ncclCommAbort(comm_); });
  }
}

void NcclCommunicator::watch() {
  using clock = std::chrono::steady_clock;
  while (!stopping_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::unique_lock lock(mutex_);
    const uint64_t completed = completion_->completed();
    bool retired = false;
    while (!in_flight_.empty() && in_flight_.front().index <= completed) {
      in_flight_.pop_front();
      retired = true;
    }
    if (in_flight_.empty()) continue;
    InFlight& front = in_flight_.front();
    // An operation queued behind a slow one starts its clock when that one finishes (to the watchdog's resolution).
    if (retired) front.started = std::max(front.started, clock::now());
    if (std::chrono::duration<double>(clock::now() - front.started).count() <= timeout_seconds()) continue;
    const OpInfo info = front.info;
    lock.unlock();
    abort_on_timeout(fault_context(), info, [this] { ncclCommAbort(comm_); });
  }
}

template <class Enqueue>
Work NcclCommunicator::launch(const OpInfo& info, std::vector<Tensor> tensors, Enqueue&& enqueue, bool host_blocking) {
  Event ready;
  PRIMER_CUDA_CHECK(cudaEventRecord(ready.event, cuda::stream()));
  PRIMER_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready.event, 0));
  uint64_t index = 0;
  {  // on the clock before the enqueue, which itself can block the host when a peer never comes
    std::lock_guard lock(mutex_);
    index = ++launched_;
    in_flight_.push_back(InFlight{info, index, std::chrono::steady_clock::now()});
  }
  try {
    enqueue();
  } catch (...) {
    std::lock_guard lock(mutex_);
    in_flight_.pop_back();  // never enqueued: nothing to wait for (its index is skipped, the order still holds)
    throw;
  }
  auto done = std::make_shared<Event>();
  PRIMER_CUDA_CHECK(cudaEventRecord(done->event, stream_));
  completion_->record(index, stream_);
  return Work(std::make_unique<NcclPending>(done, done->event, std::move(tensors), host_blocking));
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  PRIMER_CHECK(color >= 0, "rank {}: split: color {} must be >= 0", rank(), color);
  barrier("split");  // the splits cannot time out: first make sure every rank has come this far
  MPI_Comm part_mpi = MPI_COMM_NULL;
  if (mpi_ != MPI_COMM_NULL) PRIMER_MPI_CHECK(MPI_Comm_split(mpi_, color, key, &part_mpi));
  ncclComm_t part = nullptr;
  PRIMER_NCCL_CHECK(ncclCommSplit(comm_, color, key, &part, nullptr));
  return std::unique_ptr<Communicator>(new NcclCommunicator(part, part_mpi, device_, options()));
}

Work NcclCommunicator::start_all_reduce(const Tensor& t, ReduceOp op, const OpInfo& info) {
  return launch(info, {t}, [&] {
    PRIMER_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), nccl_op(op),
                                    comm_, stream_));
  });
}

Work NcclCommunicator::start_all_gather(const Tensor& shard, const Tensor& out, const OpInfo& info) {
  return launch(info, {shard, out}, [&] {
    PRIMER_NCCL_CHECK(ncclAllGather(shard.data_ptr(), out.data_ptr(), size_t(shard.numel()), nccl_type(shard.dtype()),
                                    comm_, stream_));
  });
}

Work NcclCommunicator::start_reduce_scatter(const Tensor& in, const Tensor& shard, ReduceOp op, const OpInfo& info) {
  return launch(info, {in, shard}, [&] {
    PRIMER_NCCL_CHECK(ncclReduceScatter(in.data_ptr(), shard.data_ptr(), size_t(shard.numel()), nccl_type(in.dtype()),
                                        nccl_op(op), comm_, stream_));
  });
}

Work NcclCommunicator::start_broadcast(const Tensor& t, int root, const OpInfo& info) {
  return launch(info, {t}, [&] {
    PRIMER_NCCL_CHECK(
        ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), root, comm_, stream_));
  });
}

Work NcclCommunicator::start_send_recv(const Tensor* send, int send_peer, const Tensor* recv, int recv_peer,
                                       const OpInfo& info) {
  std::vector<Tensor> tensors;
  if (send) tensors.push_back(*send);
  if (recv) tensors.push_back(*recv);
  return launch(info, std::move(tensors), [&] {
    PRIMER_NCCL_CHECK(ncclGroupStart());
    if (send)
      PRIMER_NCCL_CHECK(
          ncclSend(send->data_ptr(), size_t(send->numel()), nccl_type(send->dtype()), send_peer, comm_, stream_));
    if (recv)
      PRIMER_NCCL_CHECK(
          ncclRecv(recv->data_ptr(), size_t(recv->numel()), nccl_type(recv->dtype()), recv_peer, comm_, stream_));
    PRIMER_NCCL_CHECK(ncclGroupEnd());
  });
}

Work NcclCommunicator::start_all_to_all(const Tensor& in, const Tensor& out, const OpInfo& info) {
  return launch(info, {in, out}, [&] {
    size_t chunk = size_t(in.numel() / size());
    size_t chunk_bytes = chunk * dtype_size(in.dtype());
    auto* src = static_cast<char*>(in.data_ptr());
    auto* dst = static_cast<char*>(out.data_ptr());
    PRIMER_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size(); ++peer) {
      PRIMER_NCCL_CHECK(ncclSend(src + size_t(peer) * chunk_bytes, chunk, nccl_type(in.dtype()), peer, comm_, stream_));
      PRIMER_NCCL_CHECK(ncclRecv(dst + size_t(peer) * chunk_bytes, chunk, nccl_type(in.dtype()), peer, comm_, stream_));
    }
    PRIMER_NCCL_CHECK(ncclGroupEnd());
  });
}

// NCCL has no barrier: a one-element all-reduce that the host waits for.
Work NcclCommunicator::start_barrier(const OpInfo& info) {
  return launch(
      info, {barrier_scratch_},
      [&] {
        PRIMER_NCCL_CHECK(ncclAllReduce(barrier_scratch_.data_ptr(), barrier_scratch_.data_ptr(), 1, ncclFloat32,
                                        ncclSum, comm_, stream_));
      },
      /*host_blocking=*/true);
}

}  // namespace primer::parallel
#endif
