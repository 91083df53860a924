#include "layers/mixer.h"

#include "core/check.h"

namespace primer::layers {

bool prepare_state(const MixerState* state_in, MixerState* state_out, size_t convs, size_t recurrent,
                   const std::string& who) {
  const bool carried = state_in && !state_in->empty();
  if (carried) {
    PRIMER_CHECK(state_in->kv.empty(), "{}: state_in is an attention layer's key/value cache", who);
    PRIMER_CHECK(state_in->conv.size() == convs && state_in->recurrent.size() == recurrent,
                 "{}: state_in holds {} conv and {} recurrent entries, expected {} and {}", who, state_in->conv.size(),
                 state_in->recurrent.size(), convs, recurrent);
  }
  if (state_out) {
    state_out->conv.assign(convs, nullptr);
    state_out->recurrent.assign(recurrent, nullptr);
  }
  return carried;
}

ag::Var mix_gathered(SequenceMixer& mixer, const ag::Var& x, const MixerContext& ctx, const MixerState* state_in) {
  ag::SequenceExchange* sp = ctx.sequence;
  PRIMER_CHECK(sp, "USP: the mixer context has no sequence exchange");
  MixerContext whole = ctx;
  whole.sequence = nullptr;
  // Gathered once per step by the decoder when a mixer runs by USP; a mixer that falls back at run time gathers them.
  whole.positions = ctx.whole_positions.defined() ? ctx.whole_positions : sp->gather_positions(ctx.positions);
  return sp->local_part(mixer.forward(sp->gather_sequence(x), whole, state_in));
}

ag::Var mix_sequence(SequenceMixer& mixer, const ag::Var& x, const MixerContext& ctx, const MixerState* state_in) {
  ag::SequenceExchange* sp = ctx.sequence;
  if (!sp || mixer.runs_sequence_parallel(sp->recurrent_mode())) return mixer.forward(x, ctx, state_in);
  return mix_gathered(mixer, x, ctx, state_in);
}

}  // namespace primer::layers
