#include "core/storage.h"

#include <atomic>
#include <cstdlib>
#include <cstdint>

#include "core/check.h"
#include "core/cuda_runtime.h"

namespace primer {
namespace {

constexpr size_t kCpuAlignment = 64;
constexpr int kMaxDevices = 16;

struct Counters {
  std::atomic<size_t> current{0}, peak{0}, allocations{0};
  void add(size_t b) {
    const size_t now = current.fetch_add(b) + b;
    size_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {}
    ++allocations;
  }
  void sub(size_t b) { current.fetch_sub(b); }
};

Counters& counters(Device d) {
  static Counters cpu, cuda[kMaxDevices];
  return d.is_cpu() ? cpu : cuda[d.index];
}

#ifdef PRIMER_WITH_CUDA
// Keep freed memory in the device's pool instead of returning it to the driver at each sync:
// after the first step every allocation is served from the pool.
void configure_pool(int device) {
  static std::atomic<uint32_t> configured{0};
  if (configured.load() & (1u << device)) return;
  cudaMemPool_t pool;
  PRIMER_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t keep_all = UINT64_MAX;
  PRIMER_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  configured.fetch_or(1u << device);
}
#endif

// Memory for `bytes` on `device`, counted in its statistics.
void* allocate_raw(Device device, size_t bytes) {
  PRIMER_CHECK(device.is_cpu() || (device.index >= 0 && device.index < kMaxDevices), "bad device {}", device.str());
  void* ptr = nullptr;
  if (device.is_cpu()) {
    const size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    ptr = std::aligned_alloc(kCpuAlignment, rounded == 0 ? kCpuAlignment : rounded);
    PRIMER_CHECK(ptr != nullptr, "out of host memory allocating {} bytes", bytes);
  } else {
#ifdef PRIMER_WITH_CUDA
    cuda::set_device(device.index);
    configure_pool(device.index);
    if (bytes > 0) {
      const cudaError_t err = cudaMallocAsync(&ptr, bytes, cuda::stream());
      PRIMER_CHECK(err == cudaSuccess, "CUDA out of memory on {}: {} bytes requested, {} held by primer (peak {})",
                   device.str(), bytes, counters(device).current.load(), counters(device).peak.load());
    }
#else
    PRIMER_FAIL("cannot allocate on {}: this primer was built without CUDA", device.str());
#endif
  }
  counters(device).add(bytes);
  return ptr;
}

void free_raw(Device device, void* ptr, size_t bytes) {
  counters(device).sub(bytes);
  if (device.is_cpu()) {
    std::free(ptr);
    return;
  }
#ifdef PRIMER_WITH_CUDA
  // Stream-ordered free: safe while kernels queued on the compute stream still read this memory.
  if (ptr) (void)cudaFreeAsync(ptr, cuda::stream());
#endif
}

}  // namespace

std::shared_ptr<Storage> allocate(Device device, size_t bytes) {
  return std::make_shared<Storage>(allocate_raw(device, bytes), bytes, device);
}

Storage::~Storage() {
  if (ptr_) free_raw(device_, ptr_, bytes_);
}

void Storage::release_memory() {
  if (!ptr_) return;
  free_raw(device_, ptr_, bytes_);
  ptr_ = nullptr;
}

void Storage::restore_memory() {
  if (ptr_ || bytes_ == 0) return;
  ptr_ = allocate_raw(device_, bytes_);
}

MemoryStats memory_stats(Device d) {
  const Counters& c = counters(d);
  return {c.current.load(), c.peak.load(), c.allocations.load()};
}

void reset_peak_memory(Device d) {
  Counters& c = counters(d);
  c.peak.store(c.current.load());
}

}  // namespace primer
