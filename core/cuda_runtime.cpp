#include "core/cuda_runtime.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"

namespace primer::cuda {

#ifdef PRIMER_WITH_CUDA

void fail(cudaError_t err, const char* expr, const char* file, int line) {
  throw_error(file, line,
              fmt::format("CUDA error {} ({}) in {}", cudaGetErrorName(err), cudaGetErrorString(err), expr));
}

void fail_cublas(int status, const char* expr, const char* file, int line) {
  throw_error(file, line, fmt::format("cuBLAS error status {} in {}", status, expr));
}

bool compiled() { return true; }

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no device: CPU only, not an error
      return 0;
    }
    return n;
  }();
  return count;
}

bool available() { return device_count() > 0; }

void set_device(int index) {
  PRIMER_CHECK(index >= 0 && index < device_count(), "CUDA device {} requested but {} device(s) present", index,
               device_count());
  PRIMER_CUDA_CHECK(cudaSetDevice(index));
}

double peak_bf16_flops() {
  if (!available()) return 0;
  cudaDeviceProp p{};
  PRIMER_CUDA_CHECK(cudaGetDeviceProperties(&p, current_device()));
  const std::string name = p.name;
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) return 989e12;
  if (name.find("A100") != std::string::npos) return 312e12;
  return 0;
}

int current_device() {
  int d = 0;
  PRIMER_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

namespace {
thread_local cudaStream_t beside_stream = nullptr;  // set while run_beside's `beside` issues its work

// A device's second stream (of the highest priority: where blocks of both streams wait for SMs, its are placed
// first) and the two events that fork it from the compute stream and join it back.
struct SideStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};
SideStream& side_stream() {
  static std::mutex mu;
  static std::vector<SideStream> sides;
  const int d = current_device();
  std::lock_guard<std::mutex> lock(mu);
  if (sides.empty()) sides.resize(device_count());
  SideStream& s = sides[d];
  if (!s.stream) {
    int least = 0, greatest = 0;
    PRIMER_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    PRIMER_CUDA_CHECK(cudaStreamCreateWithPriority(&s.stream, cudaStreamNonBlocking, greatest));
    PRIMER_CUDA_CHECK(cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming));
    PRIMER_CUDA_CHECK(cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming));
  }
  return s;
}
}  // namespace

void run_beside(const std::function<void()>& main, const std::function<void()>& beside) {
  PRIMER_CHECK(!beside_stream, "cuda::run_beside: calls do not nest");
  static const bool one_stream = [] {
    const char* v = std::getenv("PRIMER_ONE_STREAM");
    return v && *v && *v != '0';
  }();
  if (one_stream) {
    beside();
    main();
    return;
  }
  const cudaStream_t compute = stream();
  const SideStream& side = side_stream();
  PRIMER_CUDA_CHECK(cudaEventRecord(side.fork, compute));
  PRIMER_CUDA_CHECK(cudaStreamWaitEvent(side.stream, side.fork, 0));
  // The join is recorded however `beside` or `main` ends, so that later work never runs ahead of what was issued.
  struct Join {
    const SideStream& side;
    cudaStream_t compute;
    ~Join() {
      beside_stream = nullptr;
      (void)cudaEventRecord(side.join, side.stream);
      (void)cudaStreamWaitEvent(compute, side.join, 0);
    }
  } join{side, compute};
  beside_stream = side.stream;
  beside();
  beside_stream = nullptr;
  main();
}

bool dependent_launch_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("PRIMER_NO_DEPENDENT_LAUNCH");
    return !(v && *v && *v != '0');
  }();
  return enabled;
}

cudaStream_t stream() {
  if (beside_stream) return beside_stream;
  static std::mutex mu;
  static std::vector<cudaStream_t> streams;
  const int d = current_device();
  std::lock_guard<std::mutex> lock(mu);
  if (streams.empty()) streams.resize(device_count(), nullptr);
  if (!streams[d]) PRIMER_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking));
  return streams[d];
}

namespace {
std::atomic<long long> sync_count{0}, sync_wait_ns{0};
}  // namespace

void synchronize() {
  const auto t0 = std::chrono::steady_clock::now();
  PRIMER_CUDA_CHECK(cudaStreamSynchronize(stream()));
  ++sync_count;
  sync_wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}

SyncStats sync_stats() { return {sync_count.load(), double(sync_wait_ns.load()) * 1e-6}; }

void copy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  const cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                            : cudaMemcpyDeviceToDevice;
  PRIMER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, stream()));
  // Host memory handed to us is pageable and may be freed right after: finish host-side copies now.
  if (kind != CopyKind::DeviceToDevice) synchronize();
}

void memset_zero(void* dst, size_t bytes) {
  if (bytes) PRIMER_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream()));
}

#else

[[noreturn]] static void not_built() { PRIMER_FAIL("this primer was built without CUDA (-DPRIMER_CUDA=OFF)"); }
bool compiled() { return false; }
bool available() { return false; }
int device_count() { return 0; }
void set_device(int) { not_built(); }
int current_device() { not_built(); }
void synchronize() {}
SyncStats sync_stats() { return {}; }
double peak_bf16_flops() { return 0; }
void copy(void*, const void*, size_t, CopyKind) { not_built(); }
void memset_zero(void*, size_t) { not_built(); }

#endif

}  // namespace primer::cuda
