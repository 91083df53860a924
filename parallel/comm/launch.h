// Starting and ending a (possibly) multi-rank process. Under a launcher (mpirun, srun, mpiexec: detected from
// the environment it sets) MPI is initialised and gives rank, size and the node-local rank (the shared-memory
// split); a process started on its own is rank 0 of 1 and never touches MPI. The local rank picks the GPU.
// The console learns the rank: stdout is silenced off rank 0 (unless asked not to) and stderr is prefixed.
#pragma once
#include <functional>
#include <string>

namespace primer::parallel {

struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // among the ranks on this node
  int local_size = 1;
  bool mpi = false;      // MPI initialised (launched by an MPI launcher)
  std::string launcher;  // "mpirun (Open MPI)", "srun (Slurm)", "MPI (PMI)", or "" for a plain process
};

// The launcher this process was started by, from its environment ("" if none).
std::string detect_launcher();

struct LaunchOptions {
  bool silence_stdout_off_rank0 = true;
};

// Idempotent. Requests MPI_THREAD_MULTIPLE (the NCCL watchdog reports timeouts from its own thread).
const World& init_world(int& argc, char**& argv, LaunchOptions options = {});
const World& world();  // rank 0 of 1 before init_world

// Makes the node-local rank's GPU current (CUDA builds with a GPU); returns its index, or -1 without a GPU.
// Several local ranks on fewer GPUs share them round-robin (then only the MPI backend can serve them).
int select_local_gpu();

// Work that must happen before MPI_Finalize (destroying NCCL communicators). Returns an id for removal.
int at_finalize(std::function<void()> action);
void cancel_at_finalize(int id);

// Ends every rank of the job with `exit_code` after an error on this one (which the others may be waiting for in a
// collective): MPI_Abort under a launcher with several ranks, std::exit otherwise.
[[noreturn]] void abort_job(int exit_code);

// Runs the pending at_finalize actions, then MPI_Finalize if init_world called MPI_Init. Idempotent; also the
// destructor of WorldScope.
void finalize_world();

// init_world for a main(): finalize_world when it goes out of scope (declare it before any communicator).
class WorldScope {
 public:
  WorldScope(int& argc, char**& argv, LaunchOptions options = {}) { init_world(argc, argv, options); }
  ~WorldScope() { finalize_world(); }
  WorldScope(const WorldScope&) = delete;
  WorldScope& operator=(const WorldScope&) = delete;
};

}  // namespace primer::parallel
