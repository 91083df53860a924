// How far a CUDA stream has come, readable without a CUDA call: after each operation the stream writes the
// operation's index into pinned, host-mapped memory, and the host reads it with a plain load. A watchdog that asked
// CUDA instead (cudaEventQuery) could wait, unboundedly, behind another thread's blocking CUDA call — the host thread
// synchronising on the very collective that hangs — and report a stale operation, or nothing.
#pragma once
#ifdef PRIMER_WITH_CUDA
#include <cuda_runtime_api.h>

#include <cstdint>

namespace primer::parallel {

class CompletionCounter {
 public:
  CompletionCounter();  // on the current device
  ~CompletionCounter();
  CompletionCounter(const CompletionCounter&) = delete;
  CompletionCounter& operator=(const CompletionCounter&) = delete;

  // Enqueues the write of `index` on `stream`: it lands once everything queued before it on `stream` is done.
  void record(uint64_t index, cudaStream_t stream);
  // The last index written (0 before the first); any thread, no CUDA call.
  uint64_t completed() const { return __atomic_load_n(host_, __ATOMIC_ACQUIRE); }

 private:
  uint64_t* host_ = nullptr;    // pinned, mapped
  uint64_t* device_ = nullptr;  // the same memory as the device sees it
};

}  // namespace primer::parallel
#endif
