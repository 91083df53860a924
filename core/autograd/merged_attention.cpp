#include "core/autograd/merged_attention.h"

#include "core/check.h"

namespace primer::ag {

Var merged_attention(const AttentionPart& a, const AttentionPart& b) {
  PRIMER_CHECK(a.q && b.q && a.k && a.v && b.k && b.v, "merged_attention: every part needs its q, k and v");
  const bool shared_queries = a.q == b.q;
  const ops::AttentionSource sa{a.q->value, a.k->value, a.v->value, a.options};
  const ops::AttentionSource sb{shared_queries ? Tensor() : b.q->value, b.k->value, b.v->value, b.options};
  Tensor lse;
  Var out = constant(ops::merged_attention(sa, sb, &lse));
  if (needs_grad({&a.q, &a.k, &a.v, &b.q, &b.k, &b.v}))
    record("merged_attention", {out}, [a, b, sa, sb, out, lse] {
      ops::AttentionSourceGrads ga, gb;
      ops::merged_attention_backward(out->grad, sa, sb, out->value, lse, &ga, &gb);
      accumulate_grad(a.q, ga.dq);
      if (gb.dq.defined()) accumulate_grad(b.q, gb.dq);
      accumulate_grad(a.k, ga.dk);
      accumulate_grad(a.v, ga.dv);
      accumulate_grad(b.k, gb.dk);
      accumulate_grad(b.v, gb.dv);
    });
  return out;
}

}  // namespace primer::ag
