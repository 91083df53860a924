// Whole-job fault scenarios. They end the job by design, so they are DISABLED_ here and run only through
// tests/dist/run_fault_test.sh, which checks mpirun's exit status, the time it took and the stderr report.
// PRIMER_FAULT_MODE picks how the last rank misbehaves inside "step 12": sleep, sigstop or sigkill;
// PRIMER_FAULT_DEVICE=cuda runs it on GPU tensors (NCCL and its watchdog with a GPU per rank, host-staged MPI
// where ranks share one), and exits 77 (skipped) without a GPU; PRIMER_FAULT_GROUP=odd runs it on the
// sub-communicator of the odd world ranks (the report then names sub-communicator and world ranks).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/console.h"
#include "core/cuda_runtime.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/world_communicator.h"
#include "tests/dist/dist_env.h"

namespace primer::parallel {
namespace {

TEST(DistFault, DISABLED_RankMisbehavesInsideStep) {
  const char* mode_env = std::getenv("PRIMER_FAULT_MODE");
  std::string mode = mode_env ? mode_env : "";
  ASSERT_TRUE(mode == "sleep" || mode == "sigstop" || mode == "sigkill") << "PRIMER_FAULT_MODE=" << mode;
  const char* timeout_env = std::getenv("PRIMER_FAULT_TIMEOUT");
  const char* device_env = std::getenv("PRIMER_FAULT_DEVICE");
  Device device = Device::cpu();
  if (device_env && std::string(device_env) == "cuda") {
    if (!cuda::available()) {
      console::error("fault test: no GPU, skipped");
      std::exit(77);  // every rank alike, so mpirun exits 77 too
    }
    device = Device::cuda(select_local_gpu());
  }
  std::unique_ptr<Communicator> comm =
      make_world_communicator(device, {.timeout_seconds = timeout_env ? std::atof(timeout_env) : 3.0});
  const char* group_env = std::getenv("PRIMER_FAULT_GROUP");
  if (group_env && std::string(group_env) == "odd") {
    std::unique_ptr<Communicator> odd_or_even = comm->split(comm->rank() % 2, comm->rank());
    if (comm->rank() % 2 == 0) return;  // the even ranks take no part
    comm = std::move(odd_or_even);
  }
  ASSERT_GE(comm->size(), 2);
  Tensor grads = Tensor::full({256}, 1.0, DType::F32, device);
  for (int step = 10; step <= 12; ++step) {
    comm->set_context(fmt::format("step {}", step));
    if (step == 12 && comm->rank() == comm->size() - 1) {
      if (mode == "sigkill") std::raise(SIGKILL);
      if (mode == "sigstop") std::raise(SIGSTOP);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // hung: busy elsewhere, forever
    }
    comm->all_reduce(grads, ReduceOp::Sum, "grad-sync");
    grads.to_vector<float>();  // waits for the result, also where wait() does not block the host (NCCL)
  }
  ADD_FAILURE() << "step 12's all_reduce completed without the last rank";
}

}  // namespace
}  // namespace primer::parallel
