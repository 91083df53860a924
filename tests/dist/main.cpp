// The dist test harness: every rank runs the same tests in the same order under mpirun. Only rank 0's gtest
// output reaches stdout; other ranks' failures are written to stderr with their rank prefix, and the exit
// status is agreed (any rank failing fails every rank, so mpirun exits non-zero).
#include <gtest/gtest.h>
#include <mpi.h>

#include "core/console.h"
#include "core/cuda_runtime.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/world_communicator.h"
#include "tests/dist/dist_env.h"

namespace primer::test {
namespace {

std::unique_ptr<parallel::Communicator> g_world_comm;
std::unique_ptr<parallel::Communicator> g_gpu_world_comm;

class RankFailureReporter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed() && console::rank() != 0)
      console::error("{}:{}: {}", result.file_name() ? result.file_name() : "?", result.line_number(),
                     result.summary());
  }
};

}  // namespace

parallel::Communicator& world_comm() { return *g_world_comm; }

parallel::Communicator& gpu_world_comm() {
  if (!g_gpu_world_comm) {
    int gpu = parallel::select_local_gpu();
    g_gpu_world_comm =
        parallel::make_world_communicator(Device::cuda(gpu), {.timeout_seconds = kDistTestTimeoutSeconds});
  }
  return *g_gpu_world_comm;
}

}  // namespace primer::test

int main(int argc, char** argv) {
  using namespace primer;
  parallel::WorldScope scope(argc, argv);
  parallel::select_local_gpu();  // every GPU test of this rank, one-process references too, runs on its own GPU
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new test::RankFailureReporter);
  test::g_world_comm =
      parallel::make_world_communicator(Device::cpu(), {.timeout_seconds = test::kDistTestTimeoutSeconds});
  int failed_here = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int failed = failed_here;
  if (parallel::world().mpi) MPI_Allreduce(&failed_here, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed && !failed_here && console::rank() == 0)
    console::error("a test failed on another rank: see its [rank N] lines above");
  test::g_gpu_world_comm.reset();  // before MPI_Finalize
  test::g_world_comm.reset();
  return failed;
}
