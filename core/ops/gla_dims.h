// Sizes of a scalar-gated linear attention call (core/ops/gla.h), shared by its CPU and CUDA implementations.
#pragma once
#include <cstdint>

namespace primer::ops {

struct GlaDims {
  int64_t batch = 0, time = 0, heads = 0;
  int64_t key_dim = 0;    // K: rows of the state, width of q and k
  int64_t value_dim = 0;  // V: columns of the state, width of v and o
};

// The chunk length of the chunked algorithms (CPU and CUDA): intra-chunk products are chunk × chunk.
inline constexpr int64_t kGlaChunk = 64;

inline int64_t gla_chunks(const GlaDims& d) { return (d.time + kGlaChunk - 1) / kGlaChunk; }

}  // namespace primer::ops
