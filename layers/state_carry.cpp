#include "layers/state_carry.h"

#include "core/check.h"

namespace primer::layers {

StateCarry::StateCarry(const MixerContext& ctx, const MixerState* state_in, MixerState* state_out, size_t convs,
                       size_t recurrent, const std::string& who)
    : sp_(ctx.sequence), out_(state_out), positions_(ctx.positions) {
  if (prepare_state(state_in, state_out, convs, recurrent, who)) in_ = state_in;
  if (!sp_) return;
  PRIMER_CHECK(sp_->recurrent_mode() == ag::RecurrentSequenceMode::P2P,
               "{}: runs P2P under sequence parallelism; the decoder gathers the sequence for USP", who);
  PRIMER_CHECK(!state_out, "{}: under sequence parallelism a mixer returns no final state (the last chunk's rank "
               "holds it)", who);
  if (positions_.defined() && sp_->chunks() > 1) {
    // [B, chunks·Tc] → [chunks·B, Tc], as to_rows moves the tokens.
    const int64_t B = positions_.size(0), chunks = sp_->chunks(), Tc = positions_.size(1) / chunks;
    positions_ = positions_.view({B, chunks, Tc}).transpose(0, 1).contiguous().view({chunks * B, Tc});
  }
}

ag::Var StateCarry::to_rows(const ag::Var& x) const { return sp_ ? sp_->to_chunk_rows(x) : x; }
ag::Var StateCarry::from_rows(const ag::Var& y) const { return sp_ ? sp_->from_chunk_rows(y) : y; }

ag::Var StateCarry::conv_in(size_t slot, const ag::Var& y, int64_t taps) const {
  const ag::Var given = in_ ? in_->conv.at(slot) : nullptr;
  return sp_ ? sp_->conv_halo(y, taps - 1, given) : given;
}

ag::Var StateCarry::recurrent_in(size_t slot, const std::function<ChunkSummary()>& summary) const {
  const ag::Var given = in_ ? in_->recurrent.at(slot) : nullptr;
  if (!sp_) return given;
  PRIMER_CHECK(summary, "a mixer without a chunk summary cannot run P2P under sequence parallelism");
  const ChunkSummary s = summary();
  return sp_->incoming_state(s.final_from_zero, s.transition, given);
}

}  // namespace primer::layers
