// One interface for moving tensors between ranks, whatever carries them: NCCL for GPU tensors, MPI for CPU
// tensors (and, host-staged, for GPU tensors where several ranks share a GPU), and a single-process
// stand-in when no launcher started the job. Tensors must be contiguous, of dtype f32, f64, bf16, i32 or i64,
// and on a device the backend serves; every rank calls the same collectives in the same order.
//
// Every collective has an asynchronous form returning a Work handle and a synchronous form (async + wait).
// Each call gets a sequence number (per communicator, counted on every rank alike) and an optional label;
// both, with the caller's context (set_context("step 12")), name the collective in error and timeout messages.
// A collective that does not complete within the timeout ends the job: see parallel/comm/fault_report.h.
// One thread issues a communicator's operations, and a communicator outlives the Work handles it returns.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/device.h"
#include "core/tensor.h"
#include "parallel/comm/work.h"

namespace primer::parallel {

enum class ReduceOp { Sum, Max, Min };
const char* reduce_op_name(ReduceOp op);

enum class CollectiveKind { AllReduce, AllGather, ReduceScatter, Broadcast, Send, Recv, SendRecv, AllToAll, Barrier };
inline constexpr int kCollectiveKinds = 9;
const char* collective_name(CollectiveKind kind);  // "all_reduce", "all_gather", ...

// Bytes that leave and reach this rank, per collective kind, counted as the ring algorithms move them
// (the convention of nccl-tests' bus bandwidth): all_reduce 2(n-1)/n of the tensor each way, all_gather and
// reduce_scatter (n-1) shards each way, all_to_all (n-1)/n of the tensor each way, broadcast the tensor once
// (sent by the root, received by the others), send/recv what they carry. Zero on one rank.
struct TrafficCounters {
  std::array<uint64_t, kCollectiveKinds> sent{};
  std::array<uint64_t, kCollectiveKinds> received{};
  uint64_t bytes_sent(CollectiveKind kind) const { return sent[size_t(kind)]; }
  uint64_t bytes_received(CollectiveKind kind) const { return received[size_t(kind)]; }
  uint64_t total_sent() const;
  uint64_t total_received() const;
};

struct CommOptions {
  double timeout_seconds = 600;  // a blocking wait longer than this ends the job (recipe key collective_timeout)
};

// What a collective is, for messages: "all_reduce #7 'grad-sync' (step 12)".
struct OpInfo {
  CollectiveKind kind = CollectiveKind::Barrier;
  uint64_t sequence = 0;
  std::string label;
  std::string context;
  std::string describe() const;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;  // "mpi", "mpi (host-staged GPU)", "nccl", "self"
  double timeout_seconds() const { return options_.timeout_seconds; }

  // Shown in timeout and error messages; the trainer sets it each step ("step 12").
  void set_context(std::string context) { context_ = std::move(context); }
  const std::string& context() const { return context_; }

  const TrafficCounters& traffic() const { return traffic_; }
  void reset_traffic() { traffic_ = {}; }

  // In place: every rank ends with the reduction over all ranks.
  Work all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::Sum, std::string_view label = {});
  // out holds size() × shard.numel() elements: rank r's shard at [r·n, (r+1)·n).
  Work all_gather_async(const Tensor& shard, const Tensor& out, std::string_view label = {});
  // in holds size() × shard.numel() elements; rank r receives the reduction of every rank's chunk r.
  Work reduce_scatter_async(const Tensor& in, const Tensor& shard, ReduceOp op = ReduceOp::Sum,
                            std::string_view label = {});
  Work broadcast_async(const Tensor& tensor, int root, std::string_view label = {});
  Work send_async(const Tensor& tensor, int peer, std::string_view label = {});
  Work recv_async(const Tensor& tensor, int peer, std::string_view label = {});
  // Sends to one peer while receiving from another (or the same) without deadlock: rings and halo exchanges.
  Work send_recv_async(const Tensor& send, int send_peer, const Tensor& recv, int recv_peer,
                       std::string_view label = {});
  // in and out hold size() equal chunks; chunk j of rank i's in becomes chunk i of rank j's out.
  Work all_to_all_async(const Tensor& in, const Tensor& out, std::string_view label = {});
  Work barrier_async(std::string_view label = {});

  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum, std::string_view label = {}) {
    all_reduce_async(tensor, op, label).wait();
  }
  void all_gather(const Tensor& shard, const Tensor& out, std::string_view label = {}) {
    all_gather_async(shard, out, label).wait();
  }
  void reduce_scatter(const Tensor& in, const Tensor& shard, ReduceOp op = ReduceOp::Sum, std::string_view label = {}) {
    reduce_scatter_async(in, shard, op, label).wait();
  }
  void broadcast(const Tensor& tensor, int root, std::string_view label = {}) {
    broadcast_async(tensor, root, label).wait();
  }
  void send(const Tensor& tensor, int peer, std::string_view label = {}) { send_async(tensor, peer, label).wait(); }
  void recv(const Tensor& tensor, int peer, std::string_view label = {}) { recv_async(tensor, peer, label).wait(); }
  void send_recv(const Tensor& send, int send_peer, const Tensor& recv, int recv_peer, std::string_view label = {}) {
    send_recv_async(send, send_peer, recv, recv_peer, label).wait();
  }
  void all_to_all(const Tensor& in, const Tensor& out, std::string_view label = {}) {
    all_to_all_async(in, out, label).wait();
  }
  void barrier(std::string_view label = {}) { barrier_async(label).wait(); }

  // Collective over this communicator: ranks with the same color form a new communicator, ordered by key
  // (then by rank here). color must be >= 0.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

 protected:
  Communicator(int rank, int size, CommOptions options) : rank_(rank), size_(size), options_(options) {}

  // The backends see validated arguments (contiguous, supported dtype, matching sizes, valid peers) and
  // the op's description for their messages.
  virtual Work start_all_reduce(const Tensor& tensor, ReduceOp op, const OpInfo& info) = 0;
  virtual Work start_all_gather(const Tensor& shard, const Tensor& out, const OpInfo& info) = 0;
  virtual Work start_reduce_scatter(const Tensor& in, const Tensor& shard, ReduceOp op, const OpInfo& info) = 0;
  virtual Work start_broadcast(const Tensor& tensor, int root, const OpInfo& info) = 0;
  virtual Work start_send_recv(const Tensor* send, int send_peer, const Tensor* recv, int recv_peer,
                               const OpInfo& info) = 0;  // either side may be null (plain send or recv)
  virtual Work start_all_to_all(const Tensor& in, const Tensor& out, const OpInfo& info) = 0;
  virtual Work start_barrier(const OpInfo& info) = 0;
  // Which tensors this backend moves; the message when it refuses one names the backend.
  virtual bool serves(Device device) const = 0;

  CommOptions options() const { return options_; }

 private:
  OpInfo begin(CollectiveKind kind, std::string_view label);
  void check_tensor(const Tensor& t, const char* role, const OpInfo& info) const;
  void check_peer(int peer, const char* role, const OpInfo& info) const;
  void count(CollectiveKind kind, uint64_t sent, uint64_t received);

  int rank_;
  int size_;
  CommOptions options_;
  std::string context_;
  uint64_t next_sequence_ = 0;
  TrafficCounters traffic_;
};

}  // namespace primer::parallel
