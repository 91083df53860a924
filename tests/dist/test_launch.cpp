// What the launcher set up: the world as MPI sees it, the node-local ranks, and the console's rank.
#include <gtest/gtest.h>

#include "core/console.h"
#include "parallel/comm/launch.h"
#include "tests/dist/dist_env.h"

namespace primer::parallel {
namespace {

TEST(DistLaunch, WorldMatchesTheCommunicator) {
  const World& w = world();
  Communicator& comm = test::world_comm();
  EXPECT_EQ(w.rank, comm.rank());
  EXPECT_EQ(w.size, comm.size());
  EXPECT_EQ(console::rank(), w.rank);
  EXPECT_EQ(console::world_size(), w.size);
  EXPECT_EQ(w.mpi, !w.launcher.empty());
  EXPECT_EQ(comm.backend_name(), w.mpi ? "mpi" : "self");
}

TEST(DistLaunch, LocalRanksNumberTheRanksOfEachNode) {
  const World& w = world();
  ASSERT_GE(w.local_rank, 0);
  ASSERT_LT(w.local_rank, w.local_size);
  // Every local rank of a node appears once: the sum of local ranks over the world is Σ over nodes of n(n-1)/2.
  Communicator& comm = test::world_comm();
  Tensor local = Tensor::full({2}, 0.0, DType::F64);
  local.copy_from(Tensor::from_vector(std::vector<double>{double(w.local_rank), 1.0 / w.local_size}, {2}, DType::F64));
  comm.all_reduce(local);
  std::vector<double> sums = local.to_vector<double>();
  double nodes = sums[1];
  if (nodes == 1) {  // one node: CI and this machine
    EXPECT_EQ(sums[0], double(w.size) * (w.size - 1) / 2);
  }
}

}  // namespace
}  // namespace primer::parallel
