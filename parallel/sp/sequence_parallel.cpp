#include "parallel/sp/sequence_parallel.h"

#include "core/check.h"
#include "parallel/sp/conv_halo.h"
#include "parallel/sp/head_exchange.h"
#include "parallel/sp/sequence_gather.h"

namespace primer::parallel {

ag::RecurrentSequenceMode parse_recurrent_sequence_mode(const std::string& name) {
  if (name == "p2p") return ag::RecurrentSequenceMode::P2P;
  if (name == "usp") return ag::RecurrentSequenceMode::USP;
  if (name == "a2a") return ag::RecurrentSequenceMode::A2A;
  PRIMER_FAIL("sequence-parallel mode of recurrent mixers '{}': expected p2p, usp or a2a", name);
}

const char* recurrent_sequence_mode_name(ag::RecurrentSequenceMode mode) {
  switch (mode) {
    case ag::RecurrentSequenceMode::P2P: return "p2p";
    case ag::RecurrentSequenceMode::USP: return "usp";
    case ag::RecurrentSequenceMode::A2A: return "a2a";
  }
  PRIMER_FAIL("recurrent sequence mode {}", int(mode));
}

SequenceParallel::SequenceParallel(Communicator& sp, SequenceParallelOptions options) : sp_(sp), options_(options) {}

int64_t SequenceParallel::chunks() const { return sequence_chunks(sp_.size(), options_.layout) / sp_.size(); }

ag::Var SequenceParallel::to_chunk_rows(const ag::Var& x) { return parallel::to_chunk_rows(x, chunks()); }
ag::Var SequenceParallel::from_chunk_rows(const ag::Var& x) { return parallel::from_chunk_rows(x, chunks()); }

ag::Var SequenceParallel::conv_halo(const ag::Var& x, int64_t width, const ag::Var& initial) {
  return parallel::conv_halo(sp_, options_.layout, x, width, initial);
}

ag::Var SequenceParallel::incoming_state(const ag::Var& final_from_zero, const ag::Var& transition,
                                         const ag::Var& initial) {
  return parallel::incoming_state(sp_, options_.layout, options_.state_passing, final_from_zero, transition, initial);
}

ag::Var SequenceParallel::gather_sequence(const ag::Var& x) {
  return parallel::gather_sequence(sp_, options_.layout, x);
}
ag::Var SequenceParallel::local_part(const ag::Var& y) { return parallel::local_part(sp_, options_.layout, y); }
Tensor SequenceParallel::gather_positions(const Tensor& positions) {
  return parallel::gather_sequence(sp_, options_.layout, positions);
}

ag::Var SequenceParallel::scatter_heads(const ag::Var& x) { return sp::scatter_heads(sp_, options_.layout, x); }
ag::Var SequenceParallel::gather_heads(const ag::Var& y) { return sp::gather_heads(sp_, options_.layout, y); }

ag::Var SequenceParallel::attention(const ag::Var& q, const ag::Var& k, const ag::Var& v,
                                    const ops::AttentionOptions& options) {
  return sequence_parallel_attention(sp_, options_.layout, options_.attention, q, k, v, options);
}

}  // namespace primer::parallel
