#include "parallel/comm/launch.h"

#include <cstdio>
#include <cstdlib>

#include <mpi.h>

#include <cstdlib>
#include <map>

#include "core/check.h"
#include "core/console.h"
#include "core/cuda_runtime.h"
#include "parallel/comm/mpi_util.h"

namespace primer::parallel {
namespace {

World g_world;
bool g_initialized = false;
bool g_owns_mpi = false;  // MPI_Init was ours, so MPI_Finalize is too
std::map<int, std::function<void()>> g_finalizers;
int g_next_finalizer = 0;

bool has_env(const char* name) { return std::getenv(name) != nullptr; }

}  // namespace

std::string detect_launcher() {
  if (has_env("OMPI_COMM_WORLD_SIZE")) return "mpirun (Open MPI)";
  if (has_env("PMI_SIZE") || has_env("PMIX_RANK") || has_env("MPI_LOCALNRANKS")) return "MPI (PMI)";
  if (has_env("SLURM_NTASKS") && has_env("SLURM_PROCID") && has_env("SLURM_STEP_ID")) return "srun (Slurm)";
  return "";
}

const World& init_world(int& argc, char**& argv, LaunchOptions options) {
  if (g_initialized) return g_world;
  g_initialized = true;
  g_world.launcher = detect_launcher();
  if (!g_world.launcher.empty()) {
    int provided = 0;
    if (mpi::initialized())  // by the embedding program: use its MPI as it is
      PRIMER_MPI_CHECK(MPI_Query_thread(&provided));
    else {
      PRIMER_MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
      g_owns_mpi = true;
    }
    g_world.mpi = true;
    // Errors come back as return codes, which PRIMER_MPI_CHECK turns into messages with file:line.
    PRIMER_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    PRIMER_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank));
    PRIMER_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g_world.size));
    MPI_Comm node;
    PRIMER_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_world.rank, MPI_INFO_NULL, &node));
    PRIMER_MPI_CHECK(MPI_Comm_rank(node, &g_world.local_rank));
    PRIMER_MPI_CHECK(MPI_Comm_size(node, &g_world.local_size));
    PRIMER_MPI_CHECK(MPI_Comm_free(&node));
    console::set_rank(g_world.rank, g_world.size);
    if (provided < MPI_THREAD_MULTIPLE)
      console::warn(
          "MPI provides thread level {} below MPI_THREAD_MULTIPLE: an NCCL timeout will be reported "
          "without naming the ranks that did not arrive",
          provided);
  }
  if (options.silence_stdout_off_rank0) console::silence_stdout_off_rank0();
  return g_world;
}

const World& world() { return g_world; }

int select_local_gpu() {
  if (!cuda::available()) return -1;
  int gpu = g_world.local_rank % cuda::device_count();
  cuda::set_device(gpu);
  return gpu;
}

int at_finalize(std::function<void()> action) {
  int id = g_next_finalizer++;
  g_finalizers.emplace(id, std::move(action));
  return id;
}

void cancel_at_finalize(int id) { g_finalizers.erase(id); }

void abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (g_world.mpi && g_world.size > 1 && mpi::initialized()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

void finalize_world() {
  // Newest first, like destructors: a sub-communicator goes before the one it was split from.
  while (!g_finalizers.empty()) {
    auto last = std::prev(g_finalizers.end());
    std::function<void()> action = std::move(last->second);
    g_finalizers.erase(last);
    action();
  }
  if (g_owns_mpi && mpi::initialized()) PRIMER_MPI_CHECK(MPI_Finalize());
}

}  // namespace primer::parallel
