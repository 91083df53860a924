#include "core/autograd/gla.h"

#include "core/autograd/checkpoint.h"
#include "core/ops/gla.h"

namespace primer::ag {

Var gla(const Var& q, const Var& k, const Var& v, const Var& g, double scale, const Var& state_in, Var* state_out,
        std::optional<DType> out_dtype, ops::GlaOperands operands) {
  const Tensor s0 = state_in ? state_in->value : Tensor();
  const bool grad = needs_grad({&q, &k, &v, &g, &state_in});
  // The operands: all of them kept for the backward (CUDA), which would otherwise form them again. A checkpointed
  // block's recompute is handed the first forward's output (and final state) instead; its backward then forms the
  // operands it was not handed.
  const std::vector<Tensor> results = kept_across_recompute("gla", [&] {
    Tensor st;
    Tensor o =
        ops::gla(q->value, k->value, v->value, g->value, scale, s0, state_out ? &st : nullptr, out_dtype, &operands);
    return std::vector<Tensor>{o, st};
  });
  const Tensor& st = results[1];
  Var o = constant(results[0]);
  if (!grad) operands = {};
  Var so = state_out ? constant(st) : nullptr;
  if (state_out) *state_out = so;
  if (grad) {
    std::vector<Var> outs{o};
    if (so) outs.push_back(so);
    record("gla", outs, [q, k, v, g, scale, state_in, s0, o, so, operands] {
      const ops::GlaGrads d = ops::gla_backward(grad_or_zeros(o), q->value, k->value, v->value, g->value, scale, s0,
                                                so ? so->grad : Tensor(), &operands);
      accumulate_grad(q, d.dq);
      accumulate_grad(k, d.dk);
      accumulate_grad(v, d.dv);
      accumulate_grad(g, d.dg);
      if (state_in) accumulate_grad(state_in, d.dstate_in);
    });
  }
  return o;
}

}  // namespace primer::ag
