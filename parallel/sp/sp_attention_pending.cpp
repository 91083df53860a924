// Placeholder until the sequence-parallel attention lands (branch spattn); removed by that merge.
#include "core/check.h"
#include "parallel/sp/sp_attention.h"

namespace primer::parallel {
ag::Var sequence_parallel_attention(Communicator&, SequenceLayout, AttentionSequenceMode, const ag::Var&,
                                    const ag::Var&, const ag::Var&, const ops::AttentionOptions&) {
  PRIMER_FAIL("sequence-parallel attention is not merged yet");
}
}  // namespace primer::parallel
