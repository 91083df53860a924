// Softmax attention when every row's sequence is split over the ranks of a sequence-parallel group (the attention
// half of ag::SequenceExchange): each rank holds its chunks of q, k, v in the layout's order (core/sequence_layout.h)
// and gets the attention of its queries over the whole sequence's keys, forward and backward.
#pragma once
#include <string>

#include "core/autograd/variable.h"
#include "core/ops/attention.h"
#include "core/sequence_layout.h"
#include "parallel/comm/communicator.h"

namespace primer::parallel {

enum class AttentionSequenceMode {
  Ring,       // K/V blocks rotated around the ring, partial results merged by log-sum-exp (ring-flash-attention)
  AllGather,  // K/V gathered once, local attention, dK/dV reduce-scattered (Llama 3 context parallelism)
  Ulysses,    // all-to-all from sequence to heads and back (DeepSpeed-Ulysses); the kv heads must divide the ranks
};
AttentionSequenceMode parse_attention_sequence_mode(const std::string& name);  // ring, all-gather, ulysses
const char* attention_sequence_mode_name(AttentionSequenceMode mode);

// q [B, T_local, Hq, Dh], k, v [B, T_local, Hkv, Dh]: this rank's chunks (sp.rank() of sp.size() in `layout`),
// concatenated along T. options.causal / window / scale act on global positions; q_offset and k_offset must be 0.
// Returns out [B, T_local, Hq, Dh] on the tape; gradients reach q, k, v of every rank. Collective over sp.
ag::Var sequence_parallel_attention(Communicator& sp, SequenceLayout layout, AttentionSequenceMode mode,
                                    const ag::Var& q, const ag::Var& k, const ag::Var& v,
                                    const ops::AttentionOptions& options);

}  // namespace primer::parallel
