// The job's ranks as a grid: world = dp × sp, the sp ranks of one sequence contiguous (ranks
// [d·sp, (d+1)·sp) share data-parallel index d), so sequence-parallel exchanges stay within a node where they can.
#pragma once
#include <memory>

#include "parallel/comm/communicator.h"

namespace primer::parallel {

class ProcessGrid {
 public:
  // Collective over `world` (it splits it twice). Rejects an sp that does not divide the world size.
  ProcessGrid(Communicator& world, int sp_size);

  int dp_rank() const { return dp_rank_; }
  int dp_size() const { return dp_size_; }
  int sp_rank() const { return sp_rank_; }
  int sp_size() const { return sp_size_; }

  Communicator& world() const { return world_; }
  Communicator& dp() const { return *dp_; }  // the ranks with this rank's sp index: they hold different data
  Communicator& sp() const { return *sp_; }  // the ranks that share this rank's sequences

 private:
  Communicator& world_;
  int dp_rank_ = 0, dp_size_ = 1, sp_rank_ = 0, sp_size_ = 1;
  std::unique_ptr<Communicator> dp_, sp_;
};

}  // namespace primer::parallel
