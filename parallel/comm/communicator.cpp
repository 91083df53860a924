#include "parallel/comm/communicator.h"

#include "core/check.h"

namespace primer::parallel {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::Send: return "send";
    case CollectiveKind::Recv: return "recv";
    case CollectiveKind::SendRecv: return "send_recv";
    case CollectiveKind::AllToAll: return "all_to_all";
    case CollectiveKind::Barrier: return "barrier";
  }
  return "?";
}

uint64_t TrafficCounters::total_sent() const {
  uint64_t total = 0;
  for (uint64_t b : sent) total += b;
  return total;
}

uint64_t TrafficCounters::total_received() const {
  uint64_t total = 0;
  for (uint64_t b : received) total += b;
  return total;
}

std::string OpInfo::describe() const {
  std::string s = fmt::format("{} #{}", collective_name(kind), sequence);
  if (!label.empty()) s += fmt::format(" '{}'", label);
  if (!context.empty()) s += fmt::format(" ({})", context);
  return s;
}

OpInfo Communicator::begin(CollectiveKind kind, std::string_view label) {
  return OpInfo{kind, next_sequence_++, std::string(label), context_};
}

void Communicator::check_tensor(const Tensor& t, const char* role, const OpInfo& info) const {
  PRIMER_CHECK(t.defined(), "rank {}: {}: the {} tensor is undefined", rank_, info.describe(), role);
  DType d = t.dtype();
  PRIMER_CHECK(d == DType::F32 || d == DType::F64 || d == DType::BF16 || d == DType::I32 || d == DType::I64,
               "rank {}: {}: the {} tensor {} has dtype {}; communicators move f32, f64, bf16, i32 and i64", rank_,
               info.describe(), role, t.describe(), dtype_name(d));
  PRIMER_CHECK(t.is_contiguous(), "rank {}: {}: the {} tensor {} must be contiguous (call contiguous() first)", rank_,
               info.describe(), role, t.describe());
  PRIMER_CHECK(serves(t.device()), "rank {}: {}: the {} tensor {} is on {}, which the {} backend does not serve", rank_,
               info.describe(), role, t.describe(), t.device().str(), backend_name());
}

void Communicator::check_peer(int peer, const char* role, const OpInfo& info) const {
  PRIMER_CHECK(peer >= 0 && peer < size_, "rank {}: {}: {} {} is not a rank of this communicator (size {})", rank_,
               info.describe(), role, peer, size_);
}

void Communicator::count(CollectiveKind kind, uint64_t sent, uint64_t received) {
  traffic_.sent[size_t(kind)] += sent;
  traffic_.received[size_t(kind)] += received;
}

Work Communicator::all_reduce_async(const Tensor& tensor, ReduceOp op, std::string_view label) {
  OpInfo info = begin(CollectiveKind::AllReduce, label);
  check_tensor(tensor, "reduced", info);
  uint64_t ring = uint64_t(2 * (size_ - 1)) * tensor.nbytes() / uint64_t(size_);
  count(info.kind, ring, ring);
  return start_all_reduce(tensor, op, info);
}

Work Communicator::all_gather_async(const Tensor& shard, const Tensor& out, std::string_view label) {
  OpInfo info = begin(CollectiveKind::AllGather, label);
  check_tensor(shard, "shard", info);
  check_tensor(out, "output", info);
  PRIMER_CHECK(out.dtype() == shard.dtype() && out.device() == shard.device(),
               "rank {}: {}: the output {} must have the shard's dtype and device ({})", rank_, info.describe(),
               out.describe(), shard.describe());
  PRIMER_CHECK(out.numel() == shard.numel() * size_,
               "rank {}: {}: the output {} holds {} elements; {} ranks × shard {} need {}", rank_, info.describe(),
               out.describe(), out.numel(), size_, shard.describe(), shard.numel() * size_);
  uint64_t ring = uint64_t(size_ - 1) * shard.nbytes();
  count(info.kind, ring, ring);
  return start_all_gather(shard, out, info);
}

Work Communicator::reduce_scatter_async(const Tensor& in, const Tensor& shard, ReduceOp op, std::string_view label) {
  OpInfo info = begin(CollectiveKind::ReduceScatter, label);
  check_tensor(in, "input", info);
  check_tensor(shard, "shard", info);
  PRIMER_CHECK(in.dtype() == shard.dtype() && in.device() == shard.device(),
               "rank {}: {}: the shard {} must have the input's dtype and device ({})", rank_, info.describe(),
               shard.describe(), in.describe());
  PRIMER_CHECK(in.numel() == shard.numel() * size_,
               "rank {}: {}: the input {} holds {} elements; {} ranks × shard {} need {} (pad the input to a "
               "multiple of the rank count)",
               rank_, info.describe(), in.describe(), in.numel(), size_, shard.describe(), shard.numel() * size_);
  uint64_t ring = uint64_t(size_ - 1) * shard.nbytes();
  count(info.kind, ring, ring);
  return start_reduce_scatter(in, shard, op, info);
}

Work Communicator::broadcast_async(const Tensor& tensor, int root, std::string_view label) {
  OpInfo info = begin(CollectiveKind::Broadcast, label);
  check_tensor(tensor, "broadcast", info);
  check_peer(root, "root", info);
  if (size_ > 1) count(info.kind, rank_ == root ? tensor.nbytes() : 0, rank_ == root ? 0 : tensor.nbytes());
  return start_broadcast(tensor, root, info);
}

Work Communicator::send_async(const Tensor& tensor, int peer, std::string_view label) {
  OpInfo info = begin(CollectiveKind::Send, label);
  check_tensor(tensor, "sent", info);
  check_peer(peer, "destination", info);
  PRIMER_CHECK(peer != rank_, "rank {}: {}: a rank cannot send to itself (use send_recv)", rank_, info.describe());
  count(info.kind, tensor.nbytes(), 0);
  return start_send_recv(&tensor, peer, nullptr, -1, info);
}

Work Communicator::recv_async(const Tensor& tensor, int peer, std::string_view label) {
  OpInfo info = begin(CollectiveKind::Recv, label);
  check_tensor(tensor, "received", info);
  check_peer(peer, "source", info);
  PRIMER_CHECK(peer != rank_, "rank {}: {}: a rank cannot receive from itself (use send_recv)", rank_, info.describe());
  count(info.kind, 0, tensor.nbytes());
  return start_send_recv(nullptr, -1, &tensor, peer, info);
}

Work Communicator::send_recv_async(const Tensor& send, int send_peer, const Tensor& recv, int recv_peer,
                                   std::string_view label) {
  OpInfo info = begin(CollectiveKind::SendRecv, label);
  check_tensor(send, "sent", info);
  check_tensor(recv, "received", info);
  check_peer(send_peer, "destination", info);
  check_peer(recv_peer, "source", info);
  PRIMER_CHECK(send_peer != rank_ || recv_peer == rank_,
               "rank {}: {}: sending to itself needs receiving from itself (got source {})", rank_, info.describe(),
               recv_peer);
  if (send_peer == rank_)
    PRIMER_CHECK(send.numel() == recv.numel() && send.dtype() == recv.dtype(),
                 "rank {}: {}: a send_recv with itself copies {} into {}: dtype and size must match", rank_,
                 info.describe(), send.describe(), recv.describe());
  bool remote = send_peer != rank_;
  count(info.kind, remote ? send.nbytes() : 0, remote ? recv.nbytes() : 0);
  return start_send_recv(&send, send_peer, &recv, recv_peer, info);
}

Work Communicator::all_to_all_async(const Tensor& in, const Tensor& out, std::string_view label) {
  OpInfo info = begin(CollectiveKind::AllToAll, label);
  check_tensor(in, "input", info);
  check_tensor(out, "output", info);
  PRIMER_CHECK(in.dtype() == out.dtype() && in.device() == out.device() && in.numel() == out.numel(),
               "rank {}: {}: the output {} must match the input {} in dtype, device and size", rank_, info.describe(),
               out.describe(), in.describe());
  PRIMER_CHECK(in.numel() % size_ == 0,
               "rank {}: {}: the input {} holds {} elements, not a multiple of the {} ranks (all_to_all moves equal "
               "chunks)",
               rank_, info.describe(), in.describe(), in.numel(), size_);
  uint64_t moved = uint64_t(size_ - 1) * in.nbytes() / uint64_t(size_);
  count(info.kind, moved, moved);
  return start_all_to_all(in, out, info);
}

Work Communicator::barrier_async(std::string_view label) {
  return start_barrier(begin(CollectiveKind::Barrier, label));
}

}  // namespace primer::parallel
