#ifdef PRIMER_WITH_CUDA
#include "parallel/comm/pinned_host_pool.h"

#include <bit>

#include "core/cuda_runtime.h"

namespace primer::parallel {

PinnedHostPool::~PinnedHostPool() {
  for (auto& [capacity, buffer] : free_) cudaFreeHost(buffer);  // unchecked: nothing to report to in a destructor
}

std::shared_ptr<void> PinnedHostPool::lease(size_t bytes) {
  size_t capacity = std::bit_ceil(bytes < 4096 ? size_t(4096) : bytes);
  void* buffer = nullptr;
  auto it = free_.lower_bound(capacity);
  if (it != free_.end()) {
    capacity = it->first;
    buffer = it->second;
    free_.erase(it);
  } else {
    PRIMER_CUDA_CHECK(cudaMallocHost(&buffer, capacity));
  }
  // The deleter holds the pool, so a buffer outliving its communicator still finds somewhere to go.
  return std::shared_ptr<void>(buffer,
                               [pool = shared_from_this(), capacity](void* b) { pool->free_.emplace(capacity, b); });
}

std::shared_ptr<void> PinnedHostPool::stage_in(const Tensor& t) {
  std::shared_ptr<void> buffer = lease(t.nbytes());
  PRIMER_CUDA_CHECK(cudaMemcpyAsync(buffer.get(), t.data_ptr(), t.nbytes(), cudaMemcpyDeviceToHost, cuda::stream()));
  PRIMER_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));
  return buffer;
}

void PinnedHostPool::stage_out(const void* staged, const Tensor& t) {
  PRIMER_CUDA_CHECK(cudaMemcpyAsync(t.data_ptr(), staged, t.nbytes(), cudaMemcpyHostToDevice, cuda::stream()));
  PRIMER_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));
}

}  // namespace primer::parallel
#endif
