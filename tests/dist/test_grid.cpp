// Sub-communicators: split by color and key, and the dp × sp process grid with contiguous sp ranks.
#include <gtest/gtest.h>

#include "core/check.h"
#include "parallel/comm/process_grid.h"
#include "tests/dist/dist_env.h"

namespace primer::parallel {
namespace {

using test::world_comm;

double sum_over_group(Communicator& group, double mine) {
  Tensor t = Tensor::full({1}, mine, DType::F64);
  group.all_reduce(t);
  return t.item();
}

TEST(DistGrid, SplitGroupsByColorAndOrdersByKey) {
  Communicator& world = world_comm();
  int color = world.rank() % 2;
  std::unique_ptr<Communicator> half = world.split(color, /*key=*/-world.rank());  // reversed order
  int members = (world.size() - color + 1) / 2;
  ASSERT_EQ(half->size(), members);
  // Members are the world ranks of this parity; the highest world rank gets sub-rank 0.
  int higher_same_parity = 0;
  for (int r = world.rank() + 2; r < world.size(); r += 2) ++higher_same_parity;
  EXPECT_EQ(half->rank(), higher_same_parity);
  double expected = 0;
  for (int r = color; r < world.size(); r += 2) expected += r;
  EXPECT_EQ(sum_over_group(*half, world.rank()), expected);
  EXPECT_EQ(half->backend_name(), world.backend_name());
}

TEST(DistGrid, SequenceParallelOneIsPureDataParallel) {
  Communicator& world = world_comm();
  ProcessGrid grid(world, 1);
  EXPECT_EQ(grid.dp_size(), world.size());
  EXPECT_EQ(grid.dp_rank(), world.rank());
  EXPECT_EQ(grid.sp_size(), 1);
  EXPECT_EQ(grid.sp_rank(), 0);
  EXPECT_EQ(grid.sp().size(), 1);
  EXPECT_EQ(sum_over_group(grid.dp(), 1), world.size());
}

TEST(DistGrid, SequenceRanksAreContiguous) {
  Communicator& world = world_comm();
  if (world.size() % 2 != 0) GTEST_SKIP() << "needs an even world";
  ProcessGrid grid(world, 2);
  EXPECT_EQ(grid.sp_rank(), world.rank() % 2);
  EXPECT_EQ(grid.dp_rank(), world.rank() / 2);
  EXPECT_EQ(grid.dp_size(), world.size() / 2);
  // sp groups are {2d, 2d+1}; dp groups are the ranks of one parity.
  EXPECT_EQ(sum_over_group(grid.sp(), world.rank()), 4 * grid.dp_rank() + 1);
  EXPECT_EQ(grid.dp().rank(), grid.dp_rank());
  EXPECT_EQ(grid.sp().rank(), grid.sp_rank());
}

TEST(DistGrid, IndivisibleWorldIsRejected) {
  Communicator& world = world_comm();
  int sp = world.size() + 1;  // never divides the world size
  try {
    ProcessGrid grid(world, sp);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(
                  fmt::format("{} ranks cannot form a dp × sp grid with sequence_parallel_size {}", world.size(), sp)),
              std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace primer::parallel
