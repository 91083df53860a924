#include "core/autograd/merged_attention.h"

#include "core/check.h"
#include "core/ops/lse_merge.h"

namespace primer::ag {

Var merged_attention(const AttentionPart& a, const AttentionPart& b) {
  PRIMER_CHECK(a.q && b.q && a.q->value.shape() == b.q->value.shape() && a.options.scale == b.options.scale,
               "merged_attention: the parts' queries {} and {} must have one shape, and their scales must agree",
               a.q ? a.q->value.describe() : "null", b.q ? b.q->value.describe() : "null");
  Tensor lse_a, lse_b, lse;
  const Tensor out_a = ops::attention(a.q->value, a.k->value, a.v->value, a.options, &lse_a);
  const Tensor out_b = ops::attention(b.q->value, b.k->value, b.v->value, b.options, &lse_b);
  Var out = constant(ops::lse_merge(out_a, lse_a, out_b, lse_b, &lse));
  if (needs_grad({&a.q, &a.k, &a.v, &b.q, &b.k, &b.v}))
    record("merged_attention", {out}, [a, b, out, lse] {
      for (const AttentionPart* p : {&a, &b}) {
        Tensor dq, dk, dv;
        ops::attention_backward(out->grad, p->q->value, p->k->value, p->v->value, out->value, lse, p->options, &dq, &dk,
                                &dv);
        accumulate_grad(p->q, dq);
        accumulate_grad(p->k, dk);
        accumulate_grad(p->v, dv);
      }
    });
  return out;
}

}  // namespace primer::ag
