// Every collective against its sequential result, on whatever rank count mpirun gives (CTest runs 1–4):
// small integer values make f64, f32, bf16, i32 and i64 results exact whatever the reduction order.
// Cpu/ runs on CPU tensors (MPI, or "self" without a launcher); Gpu/ on CUDA tensors where a GPU is present
// (NCCL with a GPU per rank, MPI host-staged where ranks share one) and skips elsewhere.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "tests/dist/dist_env.h"

namespace primer::parallel {
namespace {

const DType kDtypes[] = {DType::F64, DType::F32, DType::BF16, DType::I32, DType::I64};

class DistCollectives : public ::testing::TestWithParam<Device::Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Device::Kind::CUDA && !cuda::available()) GTEST_SKIP() << "no GPU";
  }
  Device device() const {
    return GetParam() == Device::Kind::CUDA ? Device::cuda(cuda::current_device()) : Device::cpu();
  }
  Communicator& communicator() const {
    return GetParam() == Device::Kind::CUDA ? test::gpu_world_comm() : test::world_comm();
  }
  Tensor make(const std::vector<double>& values, DType dtype) const {
    return Tensor::from_vector(values, {int64_t(values.size())}, dtype, device());
  }
};

INSTANTIATE_TEST_SUITE_P(Cpu, DistCollectives, ::testing::Values(Device::Kind::CPU));
INSTANTIATE_TEST_SUITE_P(Gpu, DistCollectives, ::testing::Values(Device::Kind::CUDA));

// The value rank `rank` holds at element i of chunk `chunk`: distinct, small, sign-mixed integers.
double value(int rank, int chunk, int64_t i) { return double((rank + 1) * 3 + chunk * 5 - int(i % 7)); }

std::vector<double> values(int rank, int chunk, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value(rank, chunk, i);
  return v;
}

double reduce(ReduceOp op, int ranks, int chunk, int64_t i) {
  double acc = value(0, chunk, i);
  for (int r = 1; r < ranks; ++r) {
    double v = value(r, chunk, i);
    acc = op == ReduceOp::Sum ? acc + v : op == ReduceOp::Max ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

TEST_P(DistCollectives, AllReduceEveryOpAndDtype) {
  Communicator& comm = communicator();
  const int64_t n = 13;
  for (DType dtype : kDtypes)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      Tensor t = make(values(comm.rank(), 0, n), dtype);
      comm.all_reduce(t, op, "test");
      std::vector<double> got = t.to_vector<double>();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[size_t(i)], reduce(op, comm.size(), 0, i))
            << dtype_name(dtype) << " " << reduce_op_name(op) << " element " << i;
    }
}

TEST_P(DistCollectives, AllReduceF32RandomMatchesSequentialSum) {
  Communicator& comm = communicator();
  const int64_t n = 1000;
  auto random_values = [&](int rank) {
    std::mt19937 gen(1234 + unsigned(rank));
    std::normal_distribution<float> normal;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(gen);
    return v;
  };
  Tensor t = Tensor::from_vector(random_values(comm.rank()), {n}, DType::F32, device());
  comm.all_reduce(t);
  std::vector<double> expected(size_t(n), 0.0);
  for (int r = 0; r < comm.size(); ++r) {
    std::vector<float> v = random_values(r);
    for (int64_t i = 0; i < n; ++i) expected[size_t(i)] += v[size_t(i)];
  }
  std::vector<float> got = t.to_vector<float>();
  // f32 sums of a few O(1) terms in any order: within a few ulps of the f64 sum.
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[size_t(i)], expected[size_t(i)], 4e-6 * comm.size()) << i;
}

TEST_P(DistCollectives, AllGatherIsRankMajor) {
  Communicator& comm = communicator();
  const int64_t n = 5;
  for (DType dtype : kDtypes) {
    Tensor shard = make(values(comm.rank(), 0, n), dtype);
    Tensor out = Tensor::full({comm.size(), n}, -99, dtype, device());  // any shape with size × n elements
    comm.all_gather(shard, out);
    std::vector<double> got = out.to_vector<double>();
    for (int r = 0; r < comm.size(); ++r)
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[size_t(r * n + i)], value(r, 0, i)) << dtype_name(dtype);
  }
}

TEST_P(DistCollectives, ReduceScatterGivesRankItsChunk) {
  Communicator& comm = communicator();
  const int64_t n = 3;
  for (DType dtype : kDtypes)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      std::vector<double> in;
      for (int chunk = 0; chunk < comm.size(); ++chunk) {
        std::vector<double> c = values(comm.rank(), chunk, n);
        in.insert(in.end(), c.begin(), c.end());
      }
      Tensor shard = Tensor::full({n}, -99, dtype, device());
      comm.reduce_scatter(make(in, dtype), shard, op);
      std::vector<double> got = shard.to_vector<double>();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[size_t(i)], reduce(op, comm.size(), comm.rank(), i)) << dtype_name(dtype);
    }
}

TEST_P(DistCollectives, ReduceScatterThenAllGatherIsAllReduce) {
  Communicator& comm = communicator();
  const int64_t n = 4;
  std::vector<double> full = values(comm.rank(), 0, n * comm.size());
  Tensor shard = Tensor::empty({n}, DType::F64, device()),
         gathered = Tensor::empty({n * comm.size()}, DType::F64, device());
  comm.reduce_scatter(make(full, DType::F64), shard);
  comm.all_gather(shard, gathered);
  Tensor reduced = make(full, DType::F64);
  comm.all_reduce(reduced);
  EXPECT_EQ(gathered.to_vector<double>(), reduced.to_vector<double>());
}

TEST_P(DistCollectives, BroadcastFromEveryRoot) {
  Communicator& comm = communicator();
  for (int root = 0; root < comm.size(); ++root)
    for (DType dtype : kDtypes) {
      Tensor t = comm.rank() == root ? make(values(root, 1, 6), dtype) : Tensor::full({6}, -99, dtype, device());
      comm.broadcast(t, root);
      EXPECT_EQ(t.to_vector<double>(), values(root, 1, 6)) << "root " << root << " " << dtype_name(dtype);
    }
}

TEST_P(DistCollectives, AllToAllTransposesChunks) {
  Communicator& comm = communicator();
  const int64_t chunk = 3;
  for (DType dtype : kDtypes) {
    std::vector<double> in;
    for (int to = 0; to < comm.size(); ++to)
      for (int64_t k = 0; k < chunk; ++k) in.push_back(double(16 * comm.rank() + 4 * to + k));
    Tensor out = Tensor::full({comm.size() * chunk}, -99, dtype, device());
    comm.all_to_all(make(in, dtype), out);
    std::vector<double> got = out.to_vector<double>();
    for (int from = 0; from < comm.size(); ++from)
      for (int64_t k = 0; k < chunk; ++k) {
        double expected = double(16 * from + 4 * comm.rank() + k);
        ASSERT_EQ(got[size_t(from * chunk + k)], expected) << dtype_name(dtype);
      }
  }
}

TEST_P(DistCollectives, SendRecvRing) {
  Communicator& comm = communicator();
  int next = (comm.rank() + 1) % comm.size(), prev = (comm.rank() + comm.size() - 1) % comm.size();
  // Around the ring size() times: every rank's values come back to it, having visited every rank.
  Tensor carried = make(values(comm.rank(), 0, 8), DType::F32);
  for (int hop = 1; hop <= comm.size(); ++hop) {
    Tensor received = Tensor::empty({8}, DType::F32, device());
    comm.send_recv(carried, next, received, prev, "ring");
    int origin = (comm.rank() - hop % comm.size() + comm.size()) % comm.size();
    ASSERT_EQ(received.to_vector<double>(), values(origin, 0, 8)) << "hop " << hop;
    carried = received;
  }
}

TEST_P(DistCollectives, SendAndRecvInPairs) {
  Communicator& comm = communicator();
  if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
  bool paired = comm.rank() < comm.size() / 2 * 2;
  if (!paired) return;  // the odd rank out of an odd world
  if (comm.rank() % 2 == 0) {
    comm.send(make(values(comm.rank(), 2, 9), DType::I64), comm.rank() + 1);
  } else {
    Tensor t = Tensor::empty({9}, DType::I64, device());
    comm.recv(t, comm.rank() - 1);
    EXPECT_EQ(t.to_vector<double>(), values(comm.rank() - 1, 2, 9));
  }
}

TEST_P(DistCollectives, SplitGroupsReduceSeparately) {
  Communicator& comm = communicator();
  int color = comm.rank() % 2;
  std::unique_ptr<Communicator> half = comm.split(color, comm.rank());
  EXPECT_EQ(half->backend_name(), comm.backend_name());
  Tensor t = make({double(comm.rank()), 1.0}, DType::F32);
  half->all_reduce(t);
  double rank_sum = 0, members = 0;
  for (int r = color; r < comm.size(); r += 2) rank_sum += r, members += 1;
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{rank_sum, members}));
  EXPECT_EQ(half->size(), int(members));
}

TEST_P(DistCollectives, BarrierCompletes) {
  communicator().barrier("test");
  communicator().barrier();
}

TEST_P(DistCollectives, AsyncOperationsOverlap) {
  Communicator& comm = communicator();
  const int64_t n = 64;
  Tensor reduced = make(values(comm.rank(), 0, n), DType::F64);
  Tensor shard = make(values(comm.rank(), 1, n), DType::F32),
         gathered = Tensor::empty({comm.size() * n}, DType::F32, device());
  int next = (comm.rank() + 1) % comm.size(), prev = (comm.rank() + comm.size() - 1) % comm.size();
  Tensor sent = make(values(comm.rank(), 2, n), DType::BF16), received = Tensor::empty({n}, DType::BF16, device());
  // Three operations in flight at once, waited for in the reverse order of their start.
  Work a = comm.all_reduce_async(reduced);
  Work b = comm.all_gather_async(shard, gathered);
  Work c = comm.send_recv_async(sent, next, received, prev);
  double busy = 0;
  for (int i = 0; i < 100000; ++i) busy += std::sqrt(double(i));  // compute while they progress
  EXPECT_GT(busy, 0);
  c.wait();
  b.wait();
  a.wait();
  a.wait();  // idempotent
  std::vector<double> r = reduced.to_vector<double>(), g = gathered.to_vector<double>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(r[size_t(i)], reduce(ReduceOp::Sum, comm.size(), 0, i));
  for (int rank = 0; rank < comm.size(); ++rank)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(g[size_t(rank * n + i)], value(rank, 1, i));
  EXPECT_EQ(received.to_vector<double>(), values(prev, 2, n));
  {
    Work dropped = comm.all_reduce_async(reduced);  // never waited: its destructor completes it
  }
  EXPECT_EQ(reduced.to_vector<double>()[0], reduce(ReduceOp::Sum, comm.size(), 0, 0) * comm.size());
}

TEST_P(DistCollectives, ByteCountersFollowTheRingConvention) {
  Communicator& comm = communicator();
  const uint64_t p = uint64_t(comm.size());
  comm.reset_traffic();
  Tensor shard = Tensor::zeros({10}, DType::F32, device()),
         out = Tensor::zeros({comm.size() * 10}, DType::F32, device());
  comm.all_gather(shard, out);
  comm.reduce_scatter(out, shard);
  comm.all_reduce(out);
  Tensor bf = Tensor::zeros({comm.size() * 6}, DType::BF16, device()),
         bf_out = Tensor::zeros({comm.size() * 6}, DType::BF16, device());
  comm.all_to_all(bf, bf_out);
  int next = (comm.rank() + 1) % comm.size(), prev = (comm.rank() + comm.size() - 1) % comm.size();
  Tensor halo = Tensor::zeros({3}, DType::F64, device()), halo_in = Tensor::zeros({3}, DType::F64, device());
  comm.send_recv(halo, next, halo_in, prev);
  comm.broadcast(shard, 0);
  const TrafficCounters& t = comm.traffic();
  EXPECT_EQ(t.bytes_sent(CollectiveKind::AllGather), (p - 1) * 40);
  EXPECT_EQ(t.bytes_received(CollectiveKind::AllGather), (p - 1) * 40);
  EXPECT_EQ(t.bytes_sent(CollectiveKind::ReduceScatter), (p - 1) * 40);
  EXPECT_EQ(t.bytes_sent(CollectiveKind::AllReduce), 2 * (p - 1) * p * 40 / p);
  EXPECT_EQ(t.bytes_received(CollectiveKind::AllToAll), (p - 1) * p * 12 / p);
  EXPECT_EQ(t.bytes_sent(CollectiveKind::SendRecv), p > 1 ? 24u : 0u);
  EXPECT_EQ(t.bytes_received(CollectiveKind::SendRecv), p > 1 ? 24u : 0u);
  EXPECT_EQ(t.bytes_sent(CollectiveKind::Broadcast), p > 1 && comm.rank() == 0 ? 40u : 0u);
  EXPECT_EQ(t.bytes_received(CollectiveKind::Broadcast), p > 1 && comm.rank() != 0 ? 40u : 0u);
  uint64_t sum = 0;
  for (int k = 0; k < kCollectiveKinds; ++k) sum += t.sent[size_t(k)];
  EXPECT_EQ(t.total_sent(), sum);
  comm.reset_traffic();
  EXPECT_EQ(comm.traffic().total_received(), 0u);
}

}  // namespace
}  // namespace primer::parallel
