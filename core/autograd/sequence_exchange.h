// Sequence parallelism as the mixers see it: the exchanges a mixer needs when the sequence of every row is split
// over the ranks of a sequence-parallel group, each a differentiable op on the tape. parallel/sp implements it over a
// Communicator; layers/ call it through MixerContext::sequence, so layers never include parallel/ (the same seam as
// the unit hooks of FSDP; docs/architecture.md).
//
// Layout. A rank holds `chunks()` equal chunks of every row (1 contiguous, 2 zig-zag: core/sequence_layout.h),
// stored one after the other along T: a mixer's input is [B, T_local, ...] with T_local = chunks()·Tc. Recurrent
// mixers run P2P on *chunk rows*: [chunks()·B, Tc, ...], chunk i of batch row b at row i·B + b, each row one
// contiguous run of the sequence whose predecessor (the previous chunk in sequence order) may live on another rank.
#pragma once
#include <cstdint>

#include "core/autograd/variable.h"
#include "core/ops/attention.h"

namespace primer::ag {

// How recurrent (non-attention) mixers run under sequence parallelism.
enum class RecurrentSequenceMode {
  P2P,  // state passing: conv halos, chunk summaries composed over ranks, the local chunk run from its true state
  USP,  // gather the whole sequence into the mixer, run it unmodified, keep the local part (any mixer)
  A2A,  // all-to-all from the sequence split to a head split: each rank runs the convs and the core over the whole
        // sequence for its H/P heads (Megatron-style context parallelism for Mamba, Ulysses' head scatter)
};

class SequenceExchange {
 public:
  virtual ~SequenceExchange() = default;

  virtual RecurrentSequenceMode recurrent_mode() const = 0;
  virtual int64_t chunks() const = 0;  // per rank
  virtual int64_t ranks() const = 0;   // in the group
  virtual int64_t rank() const = 0;    // this one's place in the group: under A2A, its head group

  // x [B, chunks·Tc, ...] → chunk rows [chunks·B, Tc, ...], and back (identity for one chunk per rank).
  virtual Var to_chunk_rows(const Var& x) = 0;
  virtual Var from_chunk_rows(const Var& x) = 0;

  // P2P conv halo of chunk rows x [R, Tc, C] (R = chunks·B): for each row, the last `width` rows of its
  // predecessor chunk, as a short-convolution state [R, C, width]; the sequence's first chunk gets `initial`
  // [B, C, width] (null: zeros). Backward: the halo's gradient goes back to the sender and is added to its x.
  virtual Var conv_halo(const Var& x, int64_t width, const Var& initial) = 0;

  // P2P state passing. A chunk maps the recurrent state S [R, H, K, V] entering it to S_out = M·S + E, where
  // E = final_from_zero [R, H, K, V] (the chunk's final state from a zero start) and M = transition: [R, H], the log
  // of a scalar decay (M = exp(transition), Mamba-2, GLA states, GKA's H), or [R, H, K, K] acting on the left
  // (the delta rule). Returns the state entering each local chunk [R, H, K, V]; `initial` [B, H, K, V] (null:
  // zeros) enters the sequence's first chunk. Gradients flow into E, the transition and the initial state.
  virtual Var incoming_state(const Var& final_from_zero, const Var& transition, const Var& initial) = 0;

  // USP: x [B, T_local, ...] → the whole sequence [B, T, ...] in sequence order on every rank; its backward sums
  // every rank's gradient of this rank's part (reduce-scatter).
  virtual Var gather_sequence(const Var& x) = 0;
  // The local part [B, T_local, ...] of a whole-sequence y [B, T, ...] (backward: zeros elsewhere).
  virtual Var local_part(const Var& y) = 0;
  // i32 positions [B, T_local] → [B, T] in sequence order (no gradient).
  virtual Tensor gather_positions(const Tensor& positions) = 0;

  // A2A: x [B, T_local, H, ...] (this rank's tokens, every head) → [B, T, H/P, ...] (every token in sequence order,
  // head group rank() of ranks(): heads [rank·H/P, (rank+1)·H/P)); H must be a multiple of ranks().
  virtual Var scatter_heads(const Var& x) = 0;
  // The inverse, [B, T, H/P, ...] → [B, T_local, H, ...]. Each one's backward is the other's all-to-all.
  virtual Var gather_heads(const Var& y) = 0;

  // Softmax attention of the local queries over the whole sequence's keys: q [B, T_local, Hq, Dh], k, v
  // [B, T_local, Hkv, Dh] in the local layout (options.causal, window and scale apply to global positions; the
  // offsets are the layout's). Returns [B, T_local, Hq, Dh].
  virtual Var attention(const Var& q, const Var& k, const Var& v, const ops::AttentionOptions& options) = 0;
};

}  // namespace primer::ag
