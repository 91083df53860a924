#include "parallel/sp/sequence_gather.h"

#include "core/autograd/functions.h"
#include "core/check.h"

namespace primer::parallel {

namespace {

// What a gather or a slice needs to know about [B, T, ...]: rows, per-token features, and the chunk length.
struct SequenceShape {
  int64_t B = 0, T_local = 0, features = 1, chunks = 1, Tc = 0;
};

SequenceShape shape_of(const Tensor& x, const Communicator& comm, SequenceLayout layout, bool whole) {
  PRIMER_CHECK(x.dim() >= 2, "sequence parallelism: expected [B, T, ...], got {} dims", x.dim());
  SequenceShape s;
  s.B = x.size(0);
  s.chunks = sequence_chunks(comm.size(), layout) / comm.size();
  const int64_t T = x.size(1);
  PRIMER_CHECK(T % (whole ? s.chunks * comm.size() : s.chunks) == 0,
               "sequence parallelism: {} tokens do not split into the layout's chunks", T);
  s.T_local = whole ? T / comm.size() : T;
  s.Tc = s.T_local / s.chunks;
  for (int d = 2; d < x.dim(); ++d) s.features *= x.size(d);
  return s;
}

// The view of rank `rank`'s chunk `slot` inside a whole sequence [B, T, F], and inside a local part [B, T_local, F].
Tensor whole_chunk(const Tensor& whole, const SequenceShape& s, int rank, int slot, int ranks, SequenceLayout layout) {
  const int64_t c = chunk_index(rank, slot, ranks, layout);
  return whole.slice(1, c * s.Tc, (c + 1) * s.Tc);
}
Tensor local_chunk(const Tensor& local, const SequenceShape& s, int slot) {
  return local.slice(1, slot * s.Tc, (slot + 1) * s.Tc);
}

Tensor gather_values(Communicator& comm, SequenceLayout layout, const Tensor& x, const SequenceShape& s) {
  const int P = comm.size();
  Tensor parts = Tensor::empty({P, s.B, s.T_local, s.features}, x.dtype(), x.device());
  comm.all_gather(x.contiguous(), parts, "sp-gather");
  Tensor whole = Tensor::empty({s.B, s.T_local * P, s.features}, x.dtype(), x.device());
  for (int r = 0; r < P; ++r)
    for (int slot = 0; slot < s.chunks; ++slot)
      whole_chunk(whole, s, r, slot, P, layout).copy_from(local_chunk(parts.select(0, r), s, slot));
  Shape shape = x.shape();
  shape[1] = s.T_local * P;
  return whole.view(shape);
}

}  // namespace

Tensor gather_sequence(Communicator& comm, SequenceLayout layout, const Tensor& x) {
  return gather_values(comm, layout, x, shape_of(x, comm, layout, false));
}

ag::Var gather_sequence(Communicator& comm, SequenceLayout layout, const ag::Var& x) {
  const SequenceShape s = shape_of(x->value, comm, layout, false);
  ag::Var out = ag::constant(gather_values(comm, layout, x->value, s), "gathered sequence");
  if (!ag::grad_enabled()) return out;
  ag::Node node;
  node.name = "sp_gather_sequence";
  node.outputs = {out};
  node.always_run = true;  // a collective: every rank runs it whatever gradients arrived
  out->requires_grad = true;
  node.backward = [&comm, layout, s, out, x]() {
    const int P = comm.size();
    const Tensor d = ag::grad_or_zeros(out).reshape({s.B, s.T_local * P, s.features});
    Tensor parts = Tensor::empty({P, s.B, s.T_local, s.features}, d.dtype(), d.device());
    for (int r = 0; r < P; ++r)
      for (int slot = 0; slot < s.chunks; ++slot)
        local_chunk(parts.select(0, r), s, slot).copy_from(whole_chunk(d, s, r, slot, P, layout));
    Tensor mine = Tensor::empty({s.B, s.T_local, s.features}, d.dtype(), d.device());
    comm.reduce_scatter(parts, mine, ReduceOp::Sum, "sp-gather-grad");
    ag::accumulate_grad(x, mine.view(x->value.shape()));
  };
  ag::current_tape().record(std::move(node));
  return out;
}

ag::Var local_part(Communicator& comm, SequenceLayout layout, const ag::Var& y) {
  const SequenceShape s = shape_of(y->value, comm, layout, true);
  const Tensor whole = y->value.reshape({s.B, s.T_local * comm.size(), s.features});
  Tensor mine = Tensor::empty({s.B, s.T_local, s.features}, whole.dtype(), whole.device());
  for (int slot = 0; slot < s.chunks; ++slot)
    local_chunk(mine, s, slot).copy_from(whole_chunk(whole, s, comm.rank(), slot, comm.size(), layout));
  Shape shape = y->value.shape();
  shape[1] = s.T_local;
  ag::Var out = ag::constant(mine.view(shape), "local part");
  if (!ag::needs_grad({&y})) return out;
  const int rank = comm.rank(), P = comm.size();
  ag::record("sp_local_part", {out}, [layout, s, rank, P, out, y]() {
    Tensor d = Tensor::zeros({s.B, s.T_local * P, s.features}, out->grad.dtype(), out->grad.device());
    const Tensor g = out->grad.reshape({s.B, s.T_local, s.features});
    for (int slot = 0; slot < s.chunks; ++slot)
      whole_chunk(d, s, rank, slot, P, layout).copy_from(local_chunk(g, s, slot));
    ag::accumulate_grad(y, d.view(y->value.shape()));
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
