#include "parallel/sp/sequence_order.h"

#include "core/check.h"

namespace primer::parallel::sp {
namespace {

// Calls fn(rank, slot, chunk) for every local chunk of every rank.
template <class Fn> void for_each_chunk(int64_t ranks, SequenceLayout layout, Fn fn) {
  const int64_t per_rank = sequence_chunks(ranks, layout) / ranks;
  for (int64_t r = 0; r < ranks; ++r)
    for (int64_t s = 0; s < per_rank; ++s) fn(r, s, chunk_index(r, s, ranks, layout));
}

}  // namespace

Tensor to_sequence_order(const Tensor& parts, SequenceLayout layout) {
  PRIMER_CHECK(parts.dim() >= 3, "to_sequence_order: {} is not [P, B, T_local, ...]", parts.describe());
  const int64_t ranks = parts.size(0), local = parts.size(2);
  const int64_t per_rank = sequence_chunks(ranks, layout) / ranks;
  PRIMER_CHECK(local % per_rank == 0, "to_sequence_order: T_local {} is not {} chunks", local, per_rank);
  const int64_t tc = local / per_rank;
  Shape shape(parts.shape().begin() + 1, parts.shape().end());
  shape[1] = ranks * local;
  Tensor full = Tensor::empty(shape, parts.dtype(), parts.device());
  for_each_chunk(ranks, layout, [&](int64_t r, int64_t s, int64_t c) {
    full.slice(1, c * tc, (c + 1) * tc).copy_from(parts.select(0, r).slice(1, s * tc, (s + 1) * tc));
  });
  return full;
}

Tensor to_rank_order(const Tensor& full, int64_t ranks, SequenceLayout layout) {
  PRIMER_CHECK(full.dim() >= 2, "to_rank_order: {} is not [B, T, ...]", full.describe());
  const int64_t chunks = sequence_chunks(ranks, layout);
  PRIMER_CHECK(full.size(1) % chunks == 0, "to_rank_order: T {} is not {} chunks", full.size(1), chunks);
  const int64_t tc = full.size(1) / chunks, local = full.size(1) / ranks;
  Shape shape = full.shape();
  shape[1] = local;
  shape.insert(shape.begin(), ranks);
  Tensor parts = Tensor::empty(shape, full.dtype(), full.device());
  for_each_chunk(ranks, layout, [&](int64_t r, int64_t s, int64_t c) {
    parts.select(0, r).slice(1, s * tc, (s + 1) * tc).copy_from(full.slice(1, c * tc, (c + 1) * tc));
  });
  return parts;
}

}  // namespace primer::parallel::sp
