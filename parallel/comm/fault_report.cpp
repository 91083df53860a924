#include "parallel/comm/fault_report.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "core/console.h"

namespace primer::parallel {
namespace {

constexpr int kArrivalTag = 7001;

// Ranks time out at slightly different moments (each from the start of its own wait); the grace period covers
// that skew, and the linger after printing lets later ranks print theirs before the first MPI_Abort lands.
double grace_seconds(double timeout) { return std::clamp(0.25 * timeout, 1.0, 10.0); }
constexpr double kLingerSeconds = 1.0;

// The world rank of each rank of `comm`, to name ranks of sub-communicators unambiguously. Unchecked like the
// exchange below: the job is going down either way.
std::vector<int> world_ranks(MPI_Comm comm, int size) {
  std::vector<int> ranks(static_cast<size_t>(size)), world(static_cast<size_t>(size), -1);
  for (int r = 0; r < size; ++r) ranks[size_t(r)] = r;
  MPI_Group group, world_group;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_translate_ranks(group, size, ranks.data(), world_group, world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  return world;
}

// Best effort, on purpose unchecked: the job is going down and a failing call must not hide the report.
// Returns each rank's sequence number, -1 where no answer came.
std::vector<int64_t> exchange_arrivals(const FaultContext& where, uint64_t sequence) {
  std::vector<int64_t> arrivals(size_t(where.size), -1);
  arrivals[size_t(where.rank)] = int64_t(sequence);
  int64_t mine = int64_t(sequence);
  std::vector<int64_t> theirs(size_t(where.size));
  std::vector<MPI_Request> sends, recvs(size_t(where.size), MPI_REQUEST_NULL);
  for (int peer = 0; peer < where.size; ++peer) {
    if (peer == where.rank) continue;
    MPI_Request s;
    MPI_Isend(&mine, 1, MPI_INT64_T, peer, kArrivalTag, where.monitor, &s);
    sends.push_back(s);
    MPI_Irecv(&theirs[size_t(peer)], 1, MPI_INT64_T, peer, kArrivalTag, where.monitor, &recvs[size_t(peer)]);
  }
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_seconds(where.timeout_seconds));
  int answered = 0;
  while (answered < where.size - 1 && std::chrono::steady_clock::now() < deadline) {
    for (int peer = 0; peer < where.size; ++peer) {
      if (recvs[size_t(peer)] == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Test(&recvs[size_t(peer)], &done, MPI_STATUS_IGNORE);
      if (done) {
        arrivals[size_t(peer)] = theirs[size_t(peer)];
        ++answered;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return arrivals;  // unanswered requests are left behind: MPI_Abort follows
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

std::string arrival_summary(const FaultContext& where, uint64_t sequence) {
  if (where.monitor == MPI_COMM_NULL || where.size == 1) return "";
  std::vector<int64_t> arrivals = exchange_arrivals(where, sequence);
  std::vector<int> world = world_ranks(where.monitor, where.size);
  auto name = [&](int r) {
    int w = world[size_t(r)];
    return w >= 0 && w != r ? fmt::format("{} (world rank {})", r, w) : fmt::format("{}", r);
  };
  std::vector<std::string> missing, behind, waiting;
  for (int r = 0; r < where.size; ++r) {
    int64_t at = arrivals[size_t(r)];
    if (at < 0)
      missing.push_back(name(r));
    else if (uint64_t(at) < sequence)
      behind.push_back(fmt::format("{} (at #{})", name(r), at));
    else
      waiting.push_back(name(r));
  }
  std::string s;
  if (!missing.empty())
    s += fmt::format(
        "\nrank(s) that did not arrive: {} (no answer within {:.0f} s: hung, busy outside "
        "communication, or dead)",
        join(missing), grace_seconds(where.timeout_seconds));
  if (!behind.empty()) s += fmt::format("\nrank(s) stuck in an earlier collective: {}", join(behind));
  s += fmt::format("\nrank(s) waiting in this collective: {}", join(waiting));
  return s;
}

[[noreturn]] void end_job(const std::function<void()>& abort_backend) {
  // The last resort: whatever below blocks (a backend abort, MPI_Abort itself), this process ends.
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(15));
    std::_Exit(1);
  }).detach();
  std::this_thread::sleep_for(std::chrono::duration<double>(kLingerSeconds));
  if (abort_backend) {
    // A backend abort that blocks (NCCL's, with a kernel spinning on a peer that never comes) must not keep the job
    // alive: it gets a few seconds on its own thread, then MPI_Abort ends every rank regardless.
    auto finished = std::make_shared<std::atomic<bool>>(false);
    std::thread([abort_backend, finished] {
      abort_backend();
      *finished = true;
    }).detach();
    for (int i = 0; i < 100 && !*finished; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int init = 0, finalized = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&finalized);
  if (init && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

// The first report ends the job; a second one (another communicator's watchdog, or the poller seeing the error the
// first abort causes) would abort a backend a second time, concurrently, and bury the first report: it waits instead
// for the process to end.
void claim_the_report() {
  static std::atomic<bool> claimed{false};
  if (claimed.exchange(true))
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace

void abort_on_timeout(const FaultContext& where, const OpInfo& info, const std::function<void()>& abort_backend) {
  claim_the_report();
  // Said before the arrival exchange, which waits on the other ranks: the timeout is reported whatever follows.
  console::error("collective timeout: {} on rank {} of {} (backend {}) did not complete within {} s", info.describe(),
                 where.rank, where.size, where.backend, where.timeout_seconds);
  const std::string summary = arrival_summary(where, info.sequence);
  console::error("{}ending the job", summary.empty() ? "" : summary.substr(1) + "\n");
  end_job(abort_backend);
}

void abort_on_error(const FaultContext& where, const OpInfo& info, std::string_view error,
                    const std::function<void()>& abort_backend) {
  claim_the_report();
  console::error("communication error: {} on rank {} of {} (backend {}): {}\nending the job", info.describe(),
                 where.rank, where.size, where.backend, error);
  end_job(abort_backend);
}

}  // namespace primer::parallel
