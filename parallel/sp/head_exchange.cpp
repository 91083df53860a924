#include "parallel/sp/head_exchange.h"

#include <vector>

#include "core/check.h"
#include "parallel/sp/sequence_order.h"

namespace primer::parallel::sp {
namespace {

// The permutation that moves dimension `at` of a `dims`-dimensional tensor to position `to`, the others in order.
std::vector<int> moved(int dims, int at, int to) {
  std::vector<int> order;
  for (int d = 0; d < dims; ++d)
    if (d != at) order.push_back(d);
  order.insert(order.begin() + to, at);
  return order;
}

using Exchange = Tensor (*)(Communicator&, SequenceLayout, const Tensor&, std::string_view);

// `forward` on the tape with `backward` (its inverse) carrying the gradient back.
ag::Var exchange(Communicator& comm, SequenceLayout layout, const ag::Var& x, Exchange forward, Exchange backward,
                 const char* name) {
  ag::Var out = ag::constant(forward(comm, layout, x->value.contiguous(), name), name);
  if (ag::needs_grad({&x}))
    ag::record_collective(name, {out}, [&comm, layout, x, out, backward, name] {
      ag::accumulate_grad(x, backward(comm, layout, ag::grad_or_zeros(out).contiguous(), name));
    });
  return out;
}

}  // namespace

Tensor by_head_group(const Tensor& x, int64_t ranks) {
  const Shape& s = x.shape();
  PRIMER_CHECK(s.size() >= 3 && s[2] % ranks == 0, "head exchange: {} is not [B, T, H, ...] with H a multiple of {}",
               x.describe(), ranks);
  Shape split = s;
  split[2] /= ranks;
  split.insert(split.begin() + 2, ranks);  // [B, T, P, H/P, ...]
  return x.view(split).permute(moved(int(split.size()), 2, 0));
}

Tensor from_head_groups(const Tensor& groups) {
  const Shape& s = groups.shape();
  PRIMER_CHECK(s.size() >= 4, "head exchange: {} is not [P, B, T, h, ...]", groups.describe());
  const Tensor t = groups.permute(moved(int(s.size()), 0, 2)).contiguous();  // [B, T, P, h, ...]
  Shape merged(s.begin() + 1, s.end());
  merged[2] *= s[0];
  return t.view(merged);
}

Tensor scatter_heads(Communicator& comm, SequenceLayout layout, const Tensor& x, std::string_view label) {
  const Tensor send = by_head_group(x, comm.size()).contiguous();  // [P, B, T_local, H/P, ...]
  Tensor recv = Tensor::empty(send.shape(), send.dtype(), send.device());
  comm.all_to_all(send, recv, label);
  return to_sequence_order(recv, layout);
}

Tensor gather_heads(Communicator& comm, SequenceLayout layout, const Tensor& y, std::string_view label) {
  const Tensor send = to_rank_order(y, comm.size(), layout);  // [P, B, T_local, H/P, ...]
  Tensor recv = Tensor::empty(send.shape(), send.dtype(), send.device());
  comm.all_to_all(send, recv, label);
  return from_head_groups(recv);
}

ag::Var scatter_heads(Communicator& comm, SequenceLayout layout, const ag::Var& x) {
  return exchange(comm, layout, x, &scatter_heads, &gather_heads, "sp_scatter_heads");
}

ag::Var gather_heads(Communicator& comm, SequenceLayout layout, const ag::Var& y) {
  return exchange(comm, layout, y, &gather_heads, &scatter_heads, "sp_gather_heads");
}

}  // namespace primer::parallel::sp
