#include "parallel/comm/work.h"

#include <cstdlib>
#include <exception>

#include "core/console.h"

namespace primer::parallel {

namespace {
// A destructor must not throw; an operation that failed while nobody waited for it cannot be recovered either.
void finish_or_abort(std::unique_ptr<PendingOp>& op) noexcept {
  try {
    std::unique_ptr<PendingOp> finishing = std::move(op);
    finishing->wait();
  } catch (const std::exception& e) {
    console::error("a collective dropped without wait() failed: {}", e.what());
    std::abort();
  }
}
}  // namespace

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    if (op_) finish_or_abort(op_);
    op_ = std::move(other.op_);
  }
  return *this;
}

Work::~Work() {
  if (op_) finish_or_abort(op_);
}

void Work::wait() {
  if (!op_) return;
  std::unique_ptr<PendingOp> finishing = std::move(op_);
  finishing->wait();
}

}  // namespace primer::parallel
