// Sequence parallelism over one group of ranks: ag::SequenceExchange implemented with a Communicator, for the
// mixers of one model (layers/ reach it through MixerContext::sequence). See docs/distributed.md.
#pragma once
#include <string>

#include "core/autograd/sequence_exchange.h"
#include "core/sequence_layout.h"
#include "parallel/comm/communicator.h"
#include "parallel/sp/sp_attention.h"
#include "parallel/sp/state_passing.h"

namespace primer::parallel {

struct SequenceParallelOptions {
  SequenceLayout layout = SequenceLayout::ZigZag;
  ag::RecurrentSequenceMode recurrent = ag::RecurrentSequenceMode::P2P;
  StatePassing state_passing = StatePassing::LogDepth;
  AttentionSequenceMode attention = AttentionSequenceMode::Ring;
};

ag::RecurrentSequenceMode parse_recurrent_sequence_mode(const std::string& name);  // p2p, usp, a2a
const char* recurrent_sequence_mode_name(ag::RecurrentSequenceMode mode);

class SequenceParallel final : public ag::SequenceExchange {
 public:
  // `sp` holds the ranks that share each row, in sequence order of their chunks (ProcessGrid::sp()); it must outlive
  // this object and every tape recorded through it.
  SequenceParallel(Communicator& sp, SequenceParallelOptions options);

  ag::RecurrentSequenceMode recurrent_mode() const override { return options_.recurrent; }
  int64_t chunks() const override;
  int64_t ranks() const override { return sp_.size(); }
  int64_t rank() const override { return sp_.rank(); }
  const SequenceParallelOptions& options() const { return options_; }
  Communicator& communicator() const { return sp_; }

  ag::Var to_chunk_rows(const ag::Var& x) override;
  ag::Var from_chunk_rows(const ag::Var& x) override;
  ag::Var conv_halo(const ag::Var& x, int64_t width, const ag::Var& initial) override;
  ag::Var incoming_state(const ag::Var& final_from_zero, const ag::Var& transition, const ag::Var& initial) override;
  ag::Var gather_sequence(const ag::Var& x) override;
  ag::Var local_part(const ag::Var& y) override;
  Tensor gather_positions(const Tensor& positions) override;
  ag::Var scatter_heads(const ag::Var& x) override;
  ag::Var gather_heads(const ag::Var& y) override;
  ag::Var attention(const ag::Var& q, const ag::Var& k, const ag::Var& v,
                    const ops::AttentionOptions& options) override;

 private:
  Communicator& sp_;
  SequenceParallelOptions options_;
};

}  // namespace primer::parallel
