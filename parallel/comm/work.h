// The handle of an asynchronous collective. wait() completes it from the caller's point of view: for MPI the
// data has arrived in host memory (and, host-staged, is queued back to the GPU on the compute stream); for
// NCCL the caller's compute stream waits for the collective's completion event and the host does not block.
// A handle that is dropped without wait() waits in its destructor, because the tensors it moves must stay
// alive until it completes (the handle holds them).
#pragma once
#include <memory>

namespace primer::parallel {

// What a backend does to finish one asynchronous operation.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual void wait() = 0;  // called once
};

class Work {
 public:
  Work() = default;  // already complete
  explicit Work(std::unique_ptr<PendingOp> op) : op_(std::move(op)) {}
  Work(Work&&) noexcept = default;
  Work& operator=(Work&& other) noexcept;
  ~Work();

  void wait();  // idempotent
  bool pending() const { return op_ != nullptr; }

 private:
  std::unique_ptr<PendingOp> op_;
};

}  // namespace primer::parallel
