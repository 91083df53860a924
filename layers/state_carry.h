// Where a recurrent mixer's forward gets the state entering its tokens and puts the state after them: nothing (a
// whole sequence from zeros), the caller's MixerState (decoding, chunked runs), or, under P2P sequence parallelism
// (MixerContext::sequence), the previous chunk's — conv halos from the neighbouring rank and the recurrent state
// composed from every earlier chunk's summary (ag::SequenceExchange), or, under A2A, the caller's state sliced to this
// rank's heads. A mixer written against StateCarry runs each of them without branching on which.
//
// Under P2P the mixer runs on chunk rows (to_rows / from_rows): zig-zag chunks stacked as batch rows, each one run
// of the sequence; the caller's state_in enters the sequence's first chunk, and a state_out is refused (the final
// state lives on the rank of the last chunk).
//
// Under A2A the mixer projects its local tokens, then to_heads turns each per-head tensor into the whole sequence
// for this rank's group of heads, the convs and the core run on it with the conv weights, per-head parameters and
// initial states of those heads (own_heads: differentiable slices), and from_heads brings the core's output back
// to the local tokens for the output stage. Without A2A all three are the identity.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "layers/mixer.h"

namespace primer::layers {

// A chunk's effect on a recurrent state S [R, H, K, V] entering it: S_out = M·S + E (see ag::SequenceExchange).
struct ChunkSummary {
  ag::Var final_from_zero;  // E
  ag::Var transition;       // M: [R, H] log decay, or [R, H, K, K]
};

// The heads a mixer's projections produce, which A2A splits over the ranks.
struct MixerHeads {
  int64_t q = 0, kv = 0;      // query (or mixer) heads and key/value heads; 0: the mixer does not run A2A
  bool adaptive_gqa = false;  // kv heads expanded by Adaptive GQA, which mixes all of a token's heads after the convs
};

class StateCarry {
 public:
  // `convs` short convolutions and `recurrent` recurrent states (the mixer's MixerState layout); `who` names the
  // mixer in errors; `heads` (for A2A) must each be a multiple of the sequence-parallel ranks.
  StateCarry(const MixerContext& ctx, const MixerState* state_in, MixerState* state_out, size_t convs, size_t recurrent,
             const std::string& who, const MixerHeads& heads = {});

  bool sequence_parallel() const { return sp_ != nullptr; }
  ag::Var to_rows(const ag::Var& x) const;                // [B, T_local, ...] → chunk rows (identity without P2P)
  ag::Var from_rows(const ag::Var& y) const;              // and back
  const Tensor& positions() const { return positions_; }  // the context's positions, in the rows' layout

  // A2A (identity otherwise): x [B, T_local, H, ...] → [B, T, H/P, ...], this rank's heads over the whole sequence;
  // from_heads the inverse.
  ag::Var to_heads(const ag::Var& x) const;
  ag::Var from_heads(const ag::Var& y) const;
  int64_t local_heads(int64_t heads) const;  // H/P under A2A, else H
  // Under A2A the part of x (null: null) along `dim` that belongs to this rank's heads, where x holds `segments`
  // of per-head channels one after another (e.g. Mamba-2's conv channels x | B | C; none: one segment), each split
  // into equal head groups; its gradient reaches only those rows. Identity otherwise.
  ag::Var own_heads(const ag::Var& x, int dim, const std::vector<int64_t>& segments = {}) const;

  // The state entering short convolution `slot` (null: zeros) of input y [R, T, C] with `taps` taps; under A2A the
  // caller's state's channels of this rank's heads.
  ag::Var conv_in(size_t slot, const ag::Var& y, int64_t taps) const { return conv_in_parts(slot, {y}, taps, {}); }
  // The same for one conv over channels held as separate parts [R, T, C_i] (ag::causal_conv1d_parts), whose state
  // is one [R, ΣC_i, taps-1]: `segments` are the parts' channel counts over all heads (as own_heads' under A2A);
  // under P2P each part's halo arrives separately and the halos are joined.
  ag::Var conv_in_parts(size_t slot, const std::vector<ag::Var>& parts, int64_t taps,
                        const std::vector<int64_t>& segments) const;
  // Where the conv's final state goes (null: not asked for).
  ag::Var* conv_out(size_t slot) const { return out_ ? &out_->conv.at(slot) : nullptr; }
  // The recurrent state entering (null: zeros); under P2P composed over the ranks from summary(), which is
  // evaluated only then (a mixer that cannot run P2P passes none); under A2A the caller's [B, H, K, V] state of this
  // rank's heads.
  ag::Var recurrent_in(size_t slot, const std::function<ChunkSummary()>& summary) const;
  ag::Var* recurrent_out(size_t slot) const { return out_ ? &out_->recurrent.at(slot) : nullptr; }

 private:
  bool mode(ag::RecurrentSequenceMode m) const { return sp_ && sp_->recurrent_mode() == m; }

  ag::SequenceExchange* sp_ = nullptr;
  const MixerState* in_ = nullptr;  // null when no state was carried in
  MixerState* out_ = nullptr;
  Tensor positions_;
};

}  // namespace primer::layers
