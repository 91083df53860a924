#include "parallel/sp/sp_attention.h"

#include "core/check.h"
#include "parallel/sp/attention_modes.h"

namespace primer::parallel {

AttentionSequenceMode parse_attention_sequence_mode(const std::string& name) {
  if (name == "ring") return AttentionSequenceMode::Ring;
  if (name == "all-gather") return AttentionSequenceMode::AllGather;
  if (name == "ulysses") return AttentionSequenceMode::Ulysses;
  PRIMER_FAIL("attention sequence mode '{}': expected ring, all-gather or ulysses", name);
}

const char* attention_sequence_mode_name(AttentionSequenceMode mode) {
  switch (mode) {
    case AttentionSequenceMode::Ring: return "ring";
    case AttentionSequenceMode::AllGather: return "all-gather";
    case AttentionSequenceMode::Ulysses: return "ulysses";
  }
  return "?";
}

namespace {

// Checks what every rank sees alike (shapes, options), so that a bad call fails on every rank before any
// collective instead of leaving the others waiting.
void check_arguments(const Communicator& sp, SequenceLayout layout, AttentionSequenceMode mode, const Tensor& q,
                     const Tensor& k, const Tensor& v, const ops::AttentionOptions& options) {
  constexpr const char* op = "sequence_parallel_attention";
  PRIMER_CHECK(q.defined() && k.defined() && v.defined(), "{}: q, k and v must be defined", op);
  PRIMER_CHECK(q.dim() == 4 && k.dim() == 4, "{}: q {} and k {}, expected [B, T_local, H, Dh]", op, q.describe(),
               k.describe());
  PRIMER_CHECK(k.shape() == v.shape(), "{}: k {} and v {} differ", op, k.describe(), v.describe());
  PRIMER_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype() && k.device() == q.device() && v.device() == q.device(),
               "{}: q {}, k {}, v {}: expected one dtype and device", op, q.describe(), k.describe(), v.describe());
  PRIMER_CHECK(q.size(0) == k.size(0) && q.size(1) == k.size(1) && q.size(3) == k.size(3),
               "{}: q {} and k {}: expected the same batch, local length and head_dim", op, q.describe(), k.describe());
  PRIMER_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0, "{}: q has {} heads and k {}, expected a multiple (GQA)",
               op, q.size(2), k.size(2));
  PRIMER_CHECK(options.q_offset == 0 && options.k_offset == 0,
               "{}: q_offset {} and k_offset {} must be 0 (the layout places the chunks)", op, options.q_offset,
               options.k_offset);
  const int64_t slots = sequence_chunks(sp.size(), layout) / sp.size();
  PRIMER_CHECK(q.size(1) > 0 && q.size(1) % slots == 0,
               "{}: the local length {} does not split into the {} layout's {} chunks per rank", op, q.size(1),
               sequence_layout_name(layout), slots);
  if (mode == AttentionSequenceMode::Ulysses)
    PRIMER_CHECK(q.size(2) % sp.size() == 0 && k.size(2) % sp.size() == 0,
                 "{}: ulysses splits the heads over the {} sequence-parallel ranks, but q has {} heads and k/v {} "
                 "(both must be multiples of {}); use ring or all-gather",
                 op, sp.size(), q.size(2), k.size(2), sp.size());
}

}  // namespace

ag::Var sequence_parallel_attention(Communicator& sp, SequenceLayout layout, AttentionSequenceMode mode,
                                    const ag::Var& q, const ag::Var& k, const ag::Var& v,
                                    const ops::AttentionOptions& options) {
  PRIMER_CHECK(q && k && v, "sequence_parallel_attention: q, k and v must be given");
  check_arguments(sp, layout, mode, q->value, k->value, v->value, options);
  const Tensor qc = q->value.contiguous(), kc = k->value.contiguous(), vc = v->value.contiguous();
  sp::AttentionForward forward;
  switch (mode) {
    case AttentionSequenceMode::Ring: forward = sp::ring_attention(sp, layout, qc, kc, vc, options); break;
    case AttentionSequenceMode::AllGather: forward = sp::all_gather_attention(sp, layout, qc, kc, vc, options); break;
    case AttentionSequenceMode::Ulysses: forward = sp::ulysses_attention(sp, layout, qc, kc, vc, options); break;
  }
  ag::Var out = ag::constant(forward.out, "sequence_parallel_attention");
  if (ag::needs_grad({&q, &k, &v}))
    ag::record_collective("sequence_parallel_attention", {out},
                          [q, k, v, out, backward = std::move(forward.backward), dtype = qc.dtype()] {
                            const sp::AttentionGrads g = backward(ag::grad_or_zeros(out).to(dtype).contiguous());
                            ag::accumulate_grad(q, g.dq);
                            ag::accumulate_grad(k, g.dk);
                            ag::accumulate_grad(v, g.dv);
                          });
  return out;
}

}  // namespace primer::parallel
