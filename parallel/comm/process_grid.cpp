#include "parallel/comm/process_grid.h"

#include "core/check.h"

namespace primer::parallel {

ProcessGrid::ProcessGrid(Communicator& world, int sp_size) : world_(world) {
  PRIMER_CHECK(sp_size >= 1, "process grid: sequence_parallel_size must be >= 1 (got {})", sp_size);
  int fewer = world.size() / sp_size * sp_size, more = fewer + sp_size;
  PRIMER_CHECK(world.size() % sp_size == 0,
               "process grid: {} ranks cannot form a dp × sp grid with sequence_parallel_size {}: the world size must "
               "be a multiple of it (launch {})",
               world.size(), sp_size,
               fewer > 0 ? fmt::format("-np {} or -np {}", fewer, more) : fmt::format("-np {}", more));
  sp_size_ = sp_size;
  dp_size_ = world.size() / sp_size;
  sp_rank_ = world.rank() % sp_size;
  dp_rank_ = world.rank() / sp_size;
  sp_ = world.split(/*color=*/dp_rank_, /*key=*/sp_rank_);
  dp_ = world.split(/*color=*/sp_rank_, /*key=*/dp_rank_);
}

}  // namespace primer::parallel
