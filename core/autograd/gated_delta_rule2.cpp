#include "core/autograd/gated_delta_rule2.h"

#include "core/ops/gated_delta_rule2.h"

namespace primer::ag {

Var gated_delta_rule2(const Var& q, const Var& k, const Var& v, const Var& g, const Var& b, const Var& w, double scale,
                      const Var& state_in, Var* state_out) {
  const Tensor s = state_in ? state_in->value : Tensor();
  const bool grad = needs_grad({&q, &k, &v, &g, &b, &w, &state_in});
  Tensor st, kept;  // the chunked CUDA kernels' forward keeps its scratch for the backward, which skips recomputing it
  Var o = constant(ops::gated_delta_rule2(q->value, k->value, v->value, g->value, b->value, w->value, scale, s,
                                          state_out ? &st : nullptr, grad ? &kept : nullptr));
  Var so = state_out ? constant(st) : nullptr;
  if (state_out) *state_out = so;
  if (grad) {
    std::vector<Var> outs{o};
    if (so) outs.push_back(so);
    record("gated_delta_rule2", outs, [q, k, v, g, b, w, scale, state_in, s, o, so, kept] {
      const ops::GatedDelta2Grads d =
          ops::gated_delta_rule2_backward(grad_or_zeros(o), q->value, k->value, v->value, g->value, b->value, w->value,
                                          scale, s, so ? so->grad : Tensor(), kept);
      accumulate_grad(q, d.dq);
      accumulate_grad(k, d.dk);
      accumulate_grad(v, d.dv);
      accumulate_grad(g, d.dg);
      accumulate_grad(b, d.db);
      accumulate_grad(w, d.dw);
      if (state_in) accumulate_grad(state_in, d.dstate_in);
    });
  }
  return o;
}

}  // namespace primer::ag
