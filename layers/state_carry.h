// Where a recurrent mixer's forward gets the state entering its tokens and puts the state after them: nothing (a
// whole sequence from zeros), the caller's MixerState (decoding, chunked runs), or, under P2P sequence parallelism
// (MixerContext::sequence), the previous chunk's — conv halos from the neighbouring rank and the recurrent state
// composed from every earlier chunk's summary (ag::SequenceExchange). A mixer written against StateCarry runs all
// three without branching on which.
//
// Under P2P the mixer runs on chunk rows (to_rows / from_rows): zig-zag chunks stacked as batch rows, each one run
// of the sequence; the caller's state_in enters the sequence's first chunk, and a state_out is refused (the final
// state lives on the rank of the last chunk).
#pragma once
#include <functional>
#include <string>

#include "layers/mixer.h"

namespace primer::layers {

// A chunk's effect on a recurrent state S [R, H, K, V] entering it: S_out = M·S + E (see ag::SequenceExchange).
struct ChunkSummary {
  ag::Var final_from_zero;  // E
  ag::Var transition;       // M: [R, H] log decay, or [R, H, K, K]
};

class StateCarry {
 public:
  // `convs` short convolutions and `recurrent` recurrent states (the mixer's MixerState layout); `who` names the
  // mixer in errors.
  StateCarry(const MixerContext& ctx, const MixerState* state_in, MixerState* state_out, size_t convs,
             size_t recurrent, const std::string& who);

  bool sequence_parallel() const { return sp_ != nullptr; }
  ag::Var to_rows(const ag::Var& x) const;    // [B, T_local, ...] → chunk rows (identity without P2P)
  ag::Var from_rows(const ag::Var& y) const;  // and back
  const Tensor& positions() const { return positions_; }  // the context's positions, in the rows' layout

  // The state entering short convolution `slot` (null: zeros) of input y [R, T, C] with `taps` taps.
  ag::Var conv_in(size_t slot, const ag::Var& y, int64_t taps) const;
  // Where the conv's final state goes (null: not asked for).
  ag::Var* conv_out(size_t slot) const { return out_ ? &out_->conv.at(slot) : nullptr; }
  // The recurrent state entering (null: zeros); under P2P composed over the ranks from summary(), which is
  // evaluated only then (a mixer that cannot run P2P passes none).
  ag::Var recurrent_in(size_t slot, const std::function<ChunkSummary()>& summary) const;
  ag::Var* recurrent_out(size_t slot) const { return out_ ? &out_->recurrent.at(slot) : nullptr; }

 private:
  ag::SequenceExchange* sp_ = nullptr;
  const MixerState* in_ = nullptr;  // null when no state was carried in
  MixerState* out_ = nullptr;
  Tensor positions_;
};

}  // namespace primer::layers
