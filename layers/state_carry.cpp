#include "layers/state_carry.h"

#include "core/autograd/slicing.h"
#include "core/check.h"

namespace primer::layers {

StateCarry::StateCarry(const MixerContext& ctx, const MixerState* state_in, MixerState* state_out, size_t convs,
                       size_t recurrent, const std::string& who, const MixerHeads& heads)
    : sp_(ctx.sequence), out_(state_out), positions_(ctx.positions) {
  if (prepare_state(state_in, state_out, convs, recurrent, who)) in_ = state_in;
  if (!sp_) return;
  PRIMER_CHECK(!mode(ag::RecurrentSequenceMode::USP),
               "{}: the decoder gathers the sequence for USP and runs the mixer without sequence parallelism", who);
  PRIMER_CHECK(!state_out,
               "{}: under sequence parallelism a mixer returns no final state (the last chunk's rank "
               "holds it)",
               who);
  if (mode(ag::RecurrentSequenceMode::A2A)) {
    const int64_t P = sp_->ranks();
    PRIMER_CHECK(heads.q > 0, "{}: does not run A2A sequence parallelism (the decoder runs it by USP)", who);
    PRIMER_CHECK(heads.q % P == 0 && heads.kv % P == 0,
                 "{}: A2A sequence parallelism splits the heads over the ranks, but num_attention_heads {} and "
                 "num_key_value_heads {} are not both multiples of sequence_parallel_size {}",
                 who, heads.q, heads.kv, P);
    PRIMER_CHECK(!heads.adaptive_gqa,
                 "{}: Adaptive GQA (kv_proj_rank) mixes all of a token's key/value heads into each head after the "
                 "short convolutions, so A2A sequence parallelism cannot split the heads over the ranks; use "
                 "sequence_parallel_ssm_mode p2p or usp",
                 who);
  }
  if (mode(ag::RecurrentSequenceMode::P2P) && positions_.defined() && sp_->chunks() > 1) {
    // [B, chunks·Tc] → [chunks·B, Tc], as to_rows moves the tokens.
    const int64_t B = positions_.size(0), chunks = sp_->chunks(), Tc = positions_.size(1) / chunks;
    positions_ = positions_.view({B, chunks, Tc}).transpose(0, 1).contiguous().view({chunks * B, Tc});
  }
}

ag::Var StateCarry::to_rows(const ag::Var& x) const {
  return mode(ag::RecurrentSequenceMode::P2P) ? sp_->to_chunk_rows(x) : x;
}
ag::Var StateCarry::from_rows(const ag::Var& y) const {
  return mode(ag::RecurrentSequenceMode::P2P) ? sp_->from_chunk_rows(y) : y;
}

ag::Var StateCarry::to_heads(const ag::Var& x) const {
  return mode(ag::RecurrentSequenceMode::A2A) ? sp_->scatter_heads(x) : x;
}
ag::Var StateCarry::from_heads(const ag::Var& y) const {
  return mode(ag::RecurrentSequenceMode::A2A) ? sp_->gather_heads(y) : y;
}

int64_t StateCarry::local_heads(int64_t heads) const {
  return mode(ag::RecurrentSequenceMode::A2A) ? heads / sp_->ranks() : heads;
}

ag::Var StateCarry::own_heads(const ag::Var& x, int dim, const std::vector<int64_t>& segments) const {
  if (!x || !mode(ag::RecurrentSequenceMode::A2A)) return x;
  const int64_t P = sp_->ranks(), r = sp_->rank();
  // Each segment cut into [before | this rank's group | after]; the groups are kept, in order.
  std::vector<int64_t> sizes;
  std::vector<size_t> mine;
  int64_t total = 0;
  for (const int64_t width : segments.empty() ? std::vector<int64_t>{x->value.size(dim)} : segments) {
    PRIMER_CHECK(width % P == 0, "own_heads: a segment of {} channels does not split over {} ranks", width, P);
    const int64_t group = width / P, before = r * group, after = width - before - group;
    if (before) sizes.push_back(before);
    mine.push_back(sizes.size());
    sizes.push_back(group);
    if (after) sizes.push_back(after);
    total += width;
  }
  PRIMER_CHECK(total == x->value.size(dim), "own_heads: segments of {} channels along dim {} of '{}' {}", total, dim,
               x->name, x->value.describe());
  const std::vector<ag::Var> pieces = ag::split(x, dim, sizes);
  std::vector<ag::Var> kept;
  for (const size_t i : mine) kept.push_back(pieces[i]);
  return kept.size() == 1 ? kept[0] : ag::concat(kept, dim);
}

ag::Var StateCarry::conv_in_parts(size_t slot, const std::vector<ag::Var>& parts, int64_t taps,
                                  const std::vector<int64_t>& segments) const {
  const ag::Var given = in_ ? in_->conv.at(slot) : nullptr;
  if (!mode(ag::RecurrentSequenceMode::P2P)) return own_heads(given, 1, segments);
  if (parts.size() == 1) return sp_->conv_halo(parts[0], taps - 1, given);
  // The caller's state enters the first chunk: each part gets its channels of it.
  const std::vector<ag::Var> initial = given ? ag::split(given, 1, segments) : std::vector<ag::Var>(parts.size());
  std::vector<ag::Var> halos;
  for (size_t i = 0; i < parts.size(); ++i) halos.push_back(sp_->conv_halo(parts[i], taps - 1, initial[i]));
  return ag::concat(halos, 1);
}

ag::Var StateCarry::recurrent_in(size_t slot, const std::function<ChunkSummary()>& summary) const {
  const ag::Var given = in_ ? in_->recurrent.at(slot) : nullptr;
  if (!mode(ag::RecurrentSequenceMode::P2P)) return own_heads(given, 1);
  PRIMER_CHECK(summary, "a mixer without a chunk summary cannot run P2P under sequence parallelism");
  const ChunkSummary s = summary();
  return sp_->incoming_state(s.final_from_zero, s.transition, given);
}

}  // namespace primer::layers
