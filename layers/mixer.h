// The sequence-mixer interface every token mixer implements (softmax attention today; Mamba-2, Gated DeltaNet
// and Gated KalmaNet next), so the decoder, the Priming stages and sequence parallelism treat them alike.
#pragma once
#include "core/autograd/variable.h"

namespace primer::layers {

// What a mixer needs besides its input: token positions (RoPE, per-document resets, sequence-parallel offsets).
struct MixerContext {
  Tensor positions;  // i32 [B, T] on the model's device
  Tensor inv_freq;   // f32 [head_dim / 2] RoPE inverse frequencies (attention only)
};

class SequenceMixer {
 public:
  virtual ~SequenceMixer() = default;
  // x [B, T, D] → y [B, T, D], recorded on the current tape.
  virtual ag::Var forward(const ag::Var& x, const MixerContext& ctx) = 0;
  // Forward FLOPs per token of the mixer at sequence length T (for MFU).
  virtual double flops_per_token(int64_t seq_len) const = 0;
};

}  // namespace primer::layers
