// The order in which a flash-attention kernel's CTAs take their (tile, row) pairs. A row is a (head, sequence) pair
// whose CTAs all stream the same operands from memory (the backward's: a key/value head's queries, output gradients
// and dQ accumulator); a tile is one CTA's share of it, tile 0 the heaviest under a causal mask.
//
// Rows one after another leave each row's heaviest CTA to start wherever the row begins: with fewer tiles per row
// than SMs (T <= 8K at our tile sizes), a wave then mixes the heavy tiles of some rows with the light ones of others
// and the last rows' heavy tiles run alone at the end. Rows are therefore taken in groups, within a group tile by
// tile (each row's tile 0, then each row's tile 1, ...) -- FlashAttention-3's backward scheduler
// (`SingleTileBwdLPTScheduler` in hopper/tile_scheduler.hpp, Dao-AILab/flash-attention). A group holds just enough
// rows to fill the SMs once, and no more than half the L2 holds: on an H200, groups sized by the L2 alone measured
// 2-7% slower at T = 16K, where one row already fills the SMs (docs/perf.md, "tiles in groups of rows").
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/ops/cuda/sm_count.h"

namespace primer::ops::cuda_ops::attn {

struct TileOrder {
  int tiles = 1;       // CTAs per row
  int rows = 1;        // rows in the grid
  int group_rows = 1;  // rows taken together (the last group may hold fewer)

  int blocks() const { return tiles * rows; }

  // The (tile, row) of the CTA with linear index `id` < blocks().
  __device__ __forceinline__ void place(int id, int* tile, int* row) const {
    const int group_blocks = group_rows * tiles;
    const int group = id / group_blocks, within = id - group * group_blocks;
    const int first_row = group * group_rows;
    const int group_size = min(group_rows, rows - first_row);
    *tile = within / group_size;
    *row = first_row + (within - *tile * group_size);
  }
};

// Rows taken together: enough to fill the SMs once with their tiles, and no more than fit in half the L2 at
// `row_bytes` each; at least one.
inline TileOrder grouped_tile_order(int tiles, int rows, int64_t row_bytes) {
  const int64_t fit = row_bytes > 0 ? l2_cache_bytes() / 2 / row_bytes : rows;
  const int64_t fill = sm_count() / std::max(tiles, 1);
  return TileOrder{tiles, rows, int(std::clamp<int64_t>(std::min(fit, fill), 1, std::max(rows, 1)))};
}

}  // namespace primer::ops::cuda_ops::attn
