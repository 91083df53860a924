#include "core/cuda_runtime.h"
#include "parallel/comm/completion_counter.h"

namespace primer::parallel {
namespace {

__global__ void write_index(volatile unsigned long long* slot, unsigned long long index) {
  *slot = index;
  __threadfence_system();  // visible to the host now, not whenever the write leaves the GPU's caches
}

}  // namespace

CompletionCounter::CompletionCounter() {
  PRIMER_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_), sizeof(uint64_t), cudaHostAllocMapped));
  *host_ = 0;
  PRIMER_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0));
}

CompletionCounter::~CompletionCounter() { cudaFreeHost(host_); }  // unchecked: a destructor must not throw

void CompletionCounter::record(uint64_t index, cudaStream_t stream) {
  write_index<<<1, 1, 0, stream>>>(reinterpret_cast<volatile unsigned long long*>(device_), index);
  PRIMER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace primer::parallel
