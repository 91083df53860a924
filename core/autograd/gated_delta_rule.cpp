#include "core/autograd/gated_delta_rule.h"

#include "core/ops/gated_delta_rule.h"

namespace primer::ag {

Var gated_delta_rule(const Var& q, const Var& k, const Var& v, const Var& g, const Var& beta, double scale,
                     const Var& state_in, Var* state_out, double raw_key_eps) {
  const Tensor s = state_in ? state_in->value : Tensor();
  const bool grad = needs_grad({&q, &k, &v, &g, &beta, &state_in});
  Tensor st, kept;  // on CUDA the forward keeps its chunk scratch for the backward, which then skips recomputing it
  Var o = constant(ops::gated_delta_rule(q->value, k->value, v->value, g->value, beta->value, scale, s,
                                         state_out ? &st : nullptr, grad ? &kept : nullptr, raw_key_eps));
  Var so = state_out ? constant(st) : nullptr;
  if (state_out) *state_out = so;
  if (grad) {
    std::vector<Var> outs{o};
    if (so) outs.push_back(so);
    record("gated_delta_rule", outs, [q, k, v, g, beta, scale, state_in, s, o, so, kept, raw_key_eps] {
      const ops::GatedDeltaGrads d =
          ops::gated_delta_rule_backward(grad_or_zeros(o), q->value, k->value, v->value, g->value, beta->value, scale,
                                         s, so ? so->grad : Tensor(), kept, raw_key_eps);
      accumulate_grad(q, d.dq);
      accumulate_grad(k, d.dk);
      accumulate_grad(v, d.dv);
      accumulate_grad(g, d.dg);
      accumulate_grad(beta, d.dbeta);
      if (state_in) accumulate_grad(state_in, d.dstate_in);
    });
  }
  return o;
}

}  // namespace primer::ag
