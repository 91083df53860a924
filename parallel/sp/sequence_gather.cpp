#include "parallel/sp/sequence_gather.h"

#include "core/autograd/functions.h"
#include "core/check.h"
#include "parallel/sp/sequence_order.h"

namespace primer::parallel {

namespace {

// The local part's shape [B, T_local, ...] → the gathered one [P, B, T_local, ...].
Shape parts_shape(const Tensor& local, int ranks) {
  Shape shape = local.shape();
  shape.insert(shape.begin(), ranks);
  return shape;
}

Tensor gather_values(Communicator& comm, SequenceLayout layout, const Tensor& x) {
  PRIMER_CHECK(x.dim() >= 2, "sequence parallelism: expected [B, T_local, ...], got {}", x.describe());
  Tensor parts = Tensor::empty(parts_shape(x, comm.size()), x.dtype(), x.device());
  comm.all_gather(x.contiguous(), parts, "sp-gather");
  return sp::to_sequence_order(parts, layout);
}

}  // namespace

Tensor gather_sequence(Communicator& comm, SequenceLayout layout, const Tensor& x) {
  return gather_values(comm, layout, x);
}

ag::Var gather_sequence(Communicator& comm, SequenceLayout layout, const ag::Var& x) {
  ag::Var out = ag::constant(gather_values(comm, layout, x->value), "gathered sequence");
  ag::record_collective("sp_gather_sequence", {out}, [&comm, layout, out, x]() {
    const Tensor parts = sp::to_rank_order(ag::grad_or_zeros(out), comm.size(), layout);
    Tensor mine = Tensor::empty(x->value.shape(), parts.dtype(), parts.device());
    comm.reduce_scatter(parts, mine, ReduceOp::Sum, "sp-gather-grad");
    ag::accumulate_grad(x, mine);
  });
  return out;
}

ag::Var local_part(Communicator& comm, SequenceLayout layout, const ag::Var& y) {
  // Only this rank's chunks are copied, forward and backward (this runs once per USP layer).
  const Tensor& whole = y->value;
  const auto ranges = sequence_part(whole.size(1), comm.size(), comm.rank(), layout);
  Shape shape = whole.shape();
  shape[1] = 0;
  for (const auto& [begin, end] : ranges) shape[1] += end - begin;
  Tensor mine = Tensor::empty(shape, whole.dtype(), whole.device());
  int64_t at = 0;
  for (const auto& [begin, end] : ranges) {
    mine.slice(1, at, at + end - begin).copy_from(whole.slice(1, begin, end));
    at += end - begin;
  }
  ag::Var out = ag::constant(mine, "local part");
  if (!ag::needs_grad({&y})) return out;
  ag::record("sp_local_part", {out}, [ranges, out, y]() {
    Tensor d = Tensor::zeros(y->value.shape(), out->grad.dtype(), out->grad.device());
    int64_t from = 0;
    for (const auto& [begin, end] : ranges) {
      d.slice(1, begin, end).copy_from(out->grad.slice(1, from, from + end - begin));
      from += end - begin;
    }
    ag::accumulate_grad(y, d);
  });
  return out;
}

ag::Var to_chunk_rows(const ag::Var& x, int64_t chunks) {
  if (chunks == 1) return x;
  Shape shape = x->value.shape();
  const int64_t B = shape[0], Tc = shape[1] / chunks;
  const ag::Var swapped = ag::transpose(ag::reshape(x, {B, chunks, x->value.numel() / (B * chunks)}), 0, 1);
  shape[0] = B * chunks;
  shape[1] = Tc;
  return ag::reshape(swapped, shape);
}

ag::Var from_chunk_rows(const ag::Var& x, int64_t chunks) {
  if (chunks == 1) return x;
  Shape shape = x->value.shape();
  const int64_t B = shape[0] / chunks;
  const ag::Var swapped = ag::transpose(ag::reshape(x, {chunks, B, x->value.numel() / (B * chunks)}), 0, 1);
  shape[0] = B;
  shape[1] *= chunks;
  return ag::reshape(swapped, shape);
}

}  // namespace primer::parallel
