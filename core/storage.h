// A block of memory on one device, shared by every tensor view of it. Memory comes from the device's
// allocator (CPU: 64-byte aligned; CUDA: the stream-ordered pool) and goes back when the last view dies.
#pragma once
#include <cstddef>
#include <memory>

#include "core/device.h"

namespace primer {

struct MemoryStats {
  size_t current = 0;      // bytes held by live storages
  size_t peak = 0;         // high-water mark of `current` since the last reset
  size_t allocations = 0;  // number of allocate() calls
};

class Storage {
 public:
  Storage(void* ptr, size_t bytes, Device device) : ptr_(ptr), bytes_(bytes), device_(device) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

  // Gives the memory back while the Storage, and every tensor view of it, lives on; restore_memory() allocates it
  // again (at another address, uninitialised). FSDP's gathered weights live like this between their uses, so that
  // whatever holds a view (the autograd tape, a mixer's reshaped weight) sees the next gather. On CUDA both are
  // ordered on the compute stream.
  void release_memory();
  void restore_memory();
  bool resident() const { return ptr_ != nullptr || bytes_ == 0; }

 private:
  void* ptr_;
  size_t bytes_;
  Device device_;
};

std::shared_ptr<Storage> allocate(Device device, size_t bytes);
MemoryStats memory_stats(Device device);
void reset_peak_memory(Device device);

}  // namespace primer
