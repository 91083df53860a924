// The sequence-mixer interface every token mixer implements (softmax attention, Mamba-2, Gated DeltaNet, Gated
// KalmaNet), so the decoder, the Priming stages and sequence parallelism treat them alike.
#pragma once
#include <string>
#include <vector>

#include "core/autograd/sequence_exchange.h"
#include "core/autograd/variable.h"
#include "layers/kv_cache.h"

namespace primer::layers {

// What a mixer needs besides its input: token positions (RoPE, per-document resets, sequence-parallel offsets).
struct MixerContext {
  Tensor positions;  // i32 [B, T] on the model's device
  Tensor inv_freq;   // f32 [head_dim / 2] RoPE inverse frequencies (attention only)
  // Sequence parallelism (null: this rank holds whole rows). Then x holds this rank's part of every row, positions
  // are global, and the mixer exchanges what crosses the cut through it.
  ag::SequenceExchange* sequence = nullptr;
  Tensor whole_positions;  // with `sequence`: every row's positions in sequence order, for mixers run by USP
};

// A recurrent mixer's carried state between two calls: the short convolutions' last conv_size−1 inputs and the
// recurrent matrices (f32). Each mixer documents its entries' order and shapes. As Vars on the tape, gradients
// flow into an initial state (if it requires grad) and out of a final state (if a later use gives it one):
// what decoding and P2P sequence parallelism need.
// Attention's state is its key/value cache instead, one per row (layers/kv_cache.h): the keys (after RoPE) and values
// of the last tokens the row saw, all of them for full attention, the last `window` for a sliding window, so a decode
// step costs what its visible context costs. Rows may have seen different numbers of tokens. The cache serves
// decoding: no gradient flows through it.
struct MixerState {
  std::vector<ag::Var> conv;       // [B, C, conv_size − 1] per short convolution, in x's dtype
  std::vector<ag::Var> recurrent;  // f32, e.g. [B, H, K, V]
  std::vector<KvCache> kv;         // attention: one per row, keys and values [1, T_kept, H_kv, head_dim] in x's dtype
  bool empty() const { return conv.empty() && recurrent.empty() && kv.empty(); }
};

// For a recurrent mixer's forward: true when state_in carries a state, which must then hold `convs` conv and
// `recurrent` recurrent entries (an error naming `who` otherwise); sizes state_out's entries (when given) for the
// mixer to fill.
bool prepare_state(const MixerState* state_in, MixerState* state_out, size_t convs, size_t recurrent,
                   const std::string& who);

class SequenceMixer {
 public:
  virtual ~SequenceMixer() = default;
  // x [B, T, D] → y [B, T, D], recorded on the current tape. Recurrent mixers start from `state_in` (null or
  // empty: zeros) and, if `state_out` is non-null, fill it with the state after the last token, so that
  // forward over [x1; x2] equals forward(x1) then forward(x2) from its state (a decode step is T = 1).
  // Attention's state is its KV cache: each row's tokens' positions must continue its cache's (the mixer context's
  // positions then give RoPE).
  virtual ag::Var forward(const ag::Var& x, const MixerContext& ctx, const MixerState* state_in = nullptr,
                          MixerState* state_out = nullptr) = 0;
  // Whether the mixer runs sequence parallelism itself through MixerContext::sequence in `mode` (attention always;
  // recurrent mixers with a chunk summary under P2P, those that split their heads under A2A); the decoder runs the
  // others by USP on the whole sequence.
  virtual bool runs_sequence_parallel(ag::RecurrentSequenceMode /*mode*/) const { return false; }
  // Forward FLOPs per token of the mixer at sequence length T (for MFU).
  virtual double flops_per_token(int64_t seq_len) const = 0;
};

// The mixer on x as the decoder runs it: directly, or under sequence parallelism (ctx.sequence) by USP — the whole
// sequence gathered into the mixer, which runs unmodified, and this rank's part kept (the Priming paper's
// Eqs. 18–20) — when the mixer does not run sequence parallelism itself. A state_in then enters the whole sequence.
ag::Var mix_sequence(SequenceMixer& mixer, const ag::Var& x, const MixerContext& ctx,
                     const MixerState* state_in = nullptr);
// The USP half of mix_sequence, for a mixer that runs sequence parallelism itself but not on this input.
ag::Var mix_gathered(SequenceMixer& mixer, const ag::Var& x, const MixerContext& ctx,
                     const MixerState* state_in = nullptr);

}  // namespace primer::layers
