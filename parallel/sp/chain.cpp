#include "parallel/sp/chain.h"

#include "core/check.h"

namespace primer::parallel {

std::vector<Chain> chains_of(SequenceLayout layout, int ranks) {
  if (layout == SequenceLayout::Contiguous) return {{0, true, ranks}};
  return {{0, true, ranks}, {1, false, ranks}};
}

void chain_step(Communicator& comm, const Chain& chain, int distance, const Tensor& send, const Tensor& recv,
                std::string_view label) {
  PRIMER_CHECK(chain.ranks == comm.size(), "sequence-parallel chain over {} ranks on a communicator of {}", chain.ranks,
               comm.size());
  const int p = chain.position(comm.rank());
  const bool sends = send.defined() && p + distance < chain.ranks;
  const bool receives = recv.defined() && p - distance >= 0;
  // One send_recv where both sides exist, so NCCL sees the pair in one group (a ring of lone blocking sends could
  // deadlock); chains have no cycle, so lone sends and receives at the ends cannot.
  if (sends && receives)
    comm.send_recv(send, chain.rank_at(p + distance), recv, chain.rank_at(p - distance), label);
  else if (sends)
    comm.send(send, chain.rank_at(p + distance), label);
  else if (receives)
    comm.recv(recv, chain.rank_at(p - distance), label);
}

}  // namespace primer::parallel
