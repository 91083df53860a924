// The harness itself: a failure on one rank only must fail the whole mpirun (run by CTest as WILL_FAIL, so it
// is DISABLED_ in ordinary runs).
#include <gtest/gtest.h>

#include "tests/dist/dist_env.h"

namespace primer::parallel {
namespace {

TEST(DistHarness, DISABLED_FailsOnTheLastRankOnly) {
  Communicator& comm = test::world_comm();
  EXPECT_NE(comm.rank(), comm.size() - 1) << "the failure this test exists to produce";
}

}  // namespace
}  // namespace primer::parallel
