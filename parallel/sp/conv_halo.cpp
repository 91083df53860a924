#include "parallel/sp/conv_halo.h"

#include "core/check.h"
#include "core/ops/elementwise.h"
#include "parallel/sp/chain.h"

namespace primer::parallel {

namespace {

Tensor rows(const Tensor& t, int slot, int64_t B) { return t.slice(0, slot * B, (slot + 1) * B); }

}  // namespace

ag::Var conv_halo(Communicator& comm, SequenceLayout layout, const ag::Var& x, int64_t width, const ag::Var& initial) {
  const Tensor& xv = x->value;
  PRIMER_CHECK(xv.dim() == 3, "conv halo: chunk rows must be [R, Tc, C], got {} dims", xv.dim());
  const std::vector<Chain> chains = chains_of(layout, comm.size());
  const int64_t R = xv.size(0), Tc = xv.size(1), C = xv.size(2), B = R / int64_t(chains.size());
  PRIMER_CHECK(width >= 1 && width <= Tc,
               "sequence parallelism: each rank's chunk holds {} tokens, fewer than the {} a short convolution reads "
               "from the previous chunk (use fewer sequence-parallel ranks or longer sequences)",
               Tc, width);
  if (initial)
    PRIMER_CHECK(initial->value.shape() == Shape({B, C, width}) && initial->value.dtype() == xv.dtype(),
                 "conv halo: the initial conv state must be [{}, {}, {}] {}", B, C, width, dtype_name(xv.dtype()));

  const Tensor tail = xv.slice(1, Tc - width, Tc).transpose(1, 2).contiguous();  // [R, C, width]
  Tensor halo = Tensor::zeros({R, C, width}, xv.dtype(), xv.device());
  for (size_t c = 0; c < chains.size(); ++c) {
    const int p = chains[c].position(comm.rank());
    Tensor recv = rows(halo, chains[c].slot, B);
    chain_step(comm, chains[c], 1, rows(tail, chains[c].slot, B), p > 0 ? recv : Tensor(), "sp-conv-halo");
    if (p == 0 && c > 0) recv.copy_from(rows(tail, chains[c - 1].slot, B));  // zig-zag: the middle stays local
    if (p == 0 && c == 0 && initial) recv.copy_from(initial->value);
  }
  ag::Var out = ag::constant(halo, "conv halo");
  ag::record_collective("sp_conv_halo", {out}, [&comm, chains, B, Tc, width, out, x, initial]() {
    const Tensor dhalo = ag::grad_or_zeros(out);
    Tensor dtail = Tensor::zeros(dhalo.shape(), dhalo.dtype(), dhalo.device());
    for (size_t c = chains.size(); c-- > 0;) {
      const int p = chains[c].position(comm.rank());
      const Tensor back = rows(dhalo, chains[c].slot, B).contiguous();
      Tensor recv = Tensor::zeros(back.shape(), back.dtype(), back.device());
      const bool receives = p + 1 < chains[c].ranks;
      chain_step(comm, chains[c].reversed(), 1, p > 0 ? back : Tensor(), receives ? recv : Tensor(), "sp-conv-halo");
      Tensor mine = rows(dtail, chains[c].slot, B);
      mine.copy_from(ops::add(mine.contiguous(), recv));
      if (p == 0 && c > 0) {
        Tensor prev = rows(dtail, chains[c - 1].slot, B);
        prev.copy_from(ops::add(prev.contiguous(), back));
      }
      if (p == 0 && c == 0 && initial) ag::accumulate_grad(initial, back);
    }
    if (initial && chains[0].position(comm.rank()) != 0)
      ag::accumulate_grad(initial, Tensor::zeros(initial->value.shape(), dhalo.dtype(), dhalo.device()));
    Tensor dx = Tensor::zeros(x->value.shape(), dhalo.dtype(), dhalo.device());
    dx.slice(1, Tc - width, Tc).copy_from(dtail.transpose(1, 2));
    ag::accumulate_grad(x, dx);
  });
  return out;
}

}  // namespace primer::parallel
