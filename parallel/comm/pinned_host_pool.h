// Page-locked host buffers for staging GPU tensors through MPI (several ranks sharing a GPU): copies from and
// to page-locked memory run at full PCIe speed, where pageable memory would go through the driver's bounce
// buffer. Buffers are pooled per communicator (sizes rounded up to powers of two) and go back to the pool when
// the lease ends; the copies that use them are complete by then (stage_in/stage_out synchronise).
// Defined in CUDA builds only (elsewhere there are no GPU tensors to stage, and a null pool is all there is).
#pragma once

namespace primer::parallel {
class PinnedHostPool;
}

#ifdef PRIMER_WITH_CUDA
#include <cstddef>
#include <map>
#include <memory>

#include "core/tensor.h"

namespace primer::parallel {

class PinnedHostPool : public std::enable_shared_from_this<PinnedHostPool> {
 public:
  PinnedHostPool() = default;
  ~PinnedHostPool();
  PinnedHostPool(const PinnedHostPool&) = delete;
  PinnedHostPool& operator=(const PinnedHostPool&) = delete;

  // A page-locked buffer of at least `bytes`, returned to the pool when the last copy of the handle dies.
  std::shared_ptr<void> lease(size_t bytes);

  // The values of GPU tensor `t` in a leased buffer, after the work queued on the compute stream.
  std::shared_ptr<void> stage_in(const Tensor& t);
  // Copies a staged buffer into GPU tensor `t` on the compute stream and waits for the copy, so the buffer
  // can be reused as soon as the lease ends.
  static void stage_out(const void* staged, const Tensor& t);

 private:
  std::multimap<size_t, void*> free_;  // capacity → buffer
};

}  // namespace primer::parallel
#endif
