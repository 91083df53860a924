#include "core/autograd/chebyshev_solve.h"

#include "core/autograd/checkpoint.h"

namespace primer::ag {

Var chebyshev_solve(const Var& q, const Var& k, const Var& gk, const ops::ChebyshevOptions& options,
                    const Var& state_in, Var* state_out) {
  const Tensor g = gk ? gk->value : Tensor(), s0 = state_in ? state_in->value : Tensor();
  // Recorded, the CUDA forward hands its chunk-start states to the backward (kept until it runs, instead of
  // recomputed there). A checkpointed block's recompute is handed the first forward's x (and H_T) instead of
  // iterating again; its backward then recomputes the chunk-start states, which cost a tenth of the iterations.
  const bool recording = needs_grad({&q, &k, &gk, &state_in});
  const std::vector<Tensor> results = kept_across_recompute("chebyshev_solve", [&] {
    Tensor st, chunk_states;
    Tensor x = ops::chebyshev_solve(q->value, k->value, g, options, s0, state_out ? &st : nullptr,
                                    recording ? &chunk_states : nullptr);
    return std::vector<Tensor>{x, st, chunk_states};
  });
  const Tensor &st = results[1], &chunk_states = results[2];
  Var x = constant(results[0]);
  Var so = state_out ? constant(st) : nullptr;
  if (state_out) *state_out = so;
  if (recording) {
    std::vector<Var> outs{x};
    if (so) outs.push_back(so);
    record("chebyshev_solve", outs, [q, k, gk, g, options, state_in, s0, x, so, chunk_states] {
      const ops::ChebyshevGrads d = ops::chebyshev_solve_backward(grad_or_zeros(x), x->value, q->value, k->value, g,
                                                                  options, s0, so ? so->grad : Tensor(), chunk_states);
      accumulate_grad(q, d.dq);
      accumulate_grad(k, d.dk);
      if (gk) accumulate_grad(gk, d.dgk);
      if (state_in) accumulate_grad(state_in, d.dstate_in);
    });
  }
  return x;
}

}  // namespace primer::ag
