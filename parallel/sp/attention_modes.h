// The three ways sequence_parallel_attention (sp_attention.h) moves the sequence between ranks, each a forward
// that returns its output and the backward it leaves for the tape node. Inputs are validated and contiguous:
// q [B, T_local, Hq, Dh], k, v [B, T_local, Hkv, Dh], this rank's chunks in `layout`; options without offsets.
#pragma once
#include <functional>

#include "core/ops/attention.h"
#include "core/sequence_layout.h"
#include "core/tensor.h"
#include "parallel/comm/communicator.h"

namespace primer::parallel::sp {

struct AttentionGrads {
  Tensor dq, dk, dv;  // q's dtype, shapes of q, k, v
};

struct AttentionForward {
  Tensor out;  // [B, T_local, Hq, Dh], q's dtype
  // Collective: every rank calls it once, in the same order as the other ranks' (dout of out's shape and dtype).
  std::function<AttentionGrads(const Tensor& dout)> backward;
};

AttentionForward ring_attention(Communicator& sp, SequenceLayout layout, const Tensor& q, const Tensor& k,
                                const Tensor& v, const ops::AttentionOptions& options);
AttentionForward all_gather_attention(Communicator& sp, SequenceLayout layout, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const ops::AttentionOptions& options);
AttentionForward ulysses_attention(Communicator& sp, SequenceLayout layout, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const ops::AttentionOptions& options);

}  // namespace primer::parallel::sp
