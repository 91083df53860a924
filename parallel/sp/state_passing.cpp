#include "parallel/sp/state_passing.h"

#include "core/check.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/ops/reduce.h"
#include "parallel/sp/chain.h"

namespace primer::parallel {

StatePassing parse_state_passing(const std::string& name) {
  if (name == "log-depth") return StatePassing::LogDepth;
  if (name == "serial") return StatePassing::Serial;
  PRIMER_FAIL("state passing '{}': expected log-depth or serial", name);
}

const char* state_passing_name(StatePassing passing) {
  return passing == StatePassing::LogDepth ? "log-depth" : "serial";
}

TransitionKind transition_kind(const Tensor& transition, const Tensor& final_from_zero) {
  const Shape& e = final_from_zero.shape();
  PRIMER_CHECK(e.size() == 4, "state passing: a chunk's final state must be [R, H, K, V], got {} dims", e.size());
  const Shape& m = transition.shape();
  if (m.size() == 2 && m[0] == e[0] && m[1] == e[1]) return TransitionKind::ScalarLog;
  PRIMER_CHECK(m.size() == 4 && m[0] == e[0] && m[1] == e[1] && m[2] == e[2] && m[3] == e[2],
               "state passing: a transition must be [R, H] (log decay) or [R, H, K, K] for a state [R, H, K, V] "
               "with R = {}, H = {}, K = {}",
               e[0], e[1], e[2]);
  return TransitionKind::Matrix;
}

namespace {

// M·S for S [n, H, K, V].
Tensor apply(TransitionKind kind, const Tensor& M, const Tensor& S) {
  const Shape& s = S.shape();
  if (kind == TransitionKind::ScalarLog) return ops::mul(S, ops::unary(ops::Unary::Exp, M).reshape({s[0], s[1], 1, 1}));
  return ops::matmul(M.reshape({s[0] * s[1], s[2], s[2]}), S.reshape({s[0] * s[1], s[2], s[3]})).view(s);
}

// M₂·M₁ (M₁ first).
Tensor compose(TransitionKind kind, const Tensor& M2, const Tensor& M1) {
  if (kind == TransitionKind::ScalarLog) return ops::add(M2, M1);
  const Shape& m = M1.shape();
  return ops::matmul(M2.reshape({m[0] * m[1], m[2], m[3]}), M1.reshape({m[0] * m[1], m[2], m[3]})).view(m);
}

Tensor transposed(TransitionKind kind, const Tensor& M) {
  return kind == TransitionKind::ScalarLog ? M : M.transpose(2, 3).contiguous();
}

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

// The state entering this rank's chunk of `chain`, from the chunks before it on the chain and `start` (the state
// entering the chain's first chunk; used on that rank only, undefined: zeros).
Tensor chain_prefix(Communicator& comm, const Chain& chain, StatePassing passing, TransitionKind kind, const Tensor& M,
                    const Tensor& E, const Tensor& start) {
  const int P = chain.ranks, p = chain.position(comm.rank());
  const Tensor first = start.defined() ? start : Tensor::zeros(E.shape(), E.dtype(), E.device());
  if (P == 1) return first;
  if (passing == StatePassing::Serial) {
    // Chunk after chunk: receive the incoming state, pass the outgoing one on (P−1 dependent hops).
    Tensor s_in = p == 0 ? first : empty_like(E);
    if (p > 0) comm.recv(s_in, chain.rank_at(p - 1), "sp-state");
    if (p + 1 < P) comm.send(ops::add(apply(kind, M, s_in), E), chain.rank_at(p + 1), "sp-state");
    return s_in;
  }
  // Hillis–Steele on (M, E) pairs, exclusive: after the shift, position p holds chunk p−1's pair (the first chunk's
  // with `start` folded in); round d composes the pair d positions back, so the covered run doubles each round.
  const Tensor E0 = p == 0 && start.defined() ? ops::add(apply(kind, M, start), E) : E;
  const bool one_round = P == 2;  // the shift already completes the prefix: M is not needed after it
  Tensor xm = one_round ? Tensor() : empty_like(M), xe = empty_like(E);
  if (!one_round) chain_step(comm, chain, 1, M, p > 0 ? xm : Tensor(), "sp-state");
  chain_step(comm, chain, 1, E0, p > 0 ? xe : Tensor(), "sp-state");
  for (int d = 1; d < P - 1; d *= 2) {
    const bool last = 2 * d >= P - 1;
    const bool receives = p - d >= 1;
    Tensor rm = receives && !last ? empty_like(M) : Tensor(), re = receives ? empty_like(E) : Tensor();
    if (!last) chain_step(comm, chain, d, p >= 1 ? xm : Tensor(), rm, "sp-state");
    chain_step(comm, chain, d, p >= 1 ? xe : Tensor(), re, "sp-state");
    if (receives) {
      xe = ops::add(apply(kind, xm, re), xe);
      if (!last) xm = compose(kind, xm, rm);
    }
  }
  return p == 0 ? first : xe;
}

struct ChainGradients {
  Tensor dE, dM, dstart;  // dstart: the gradient of the state entering the chain (meaningful on its first rank)
};

// The backward of chain_prefix given the gradient of this rank's incoming state and `g_end`, the gradient of the
// state leaving the chain (on its last rank; undefined: none).
ChainGradients chain_prefix_backward(Communicator& comm, const Chain& chain, StatePassing passing, TransitionKind kind,
                                     const Tensor& M, const Tensor& S_in, const Tensor& dS_in, const Tensor& g_end) {
  const Tensor Mt = transposed(kind, M);
  ChainGradients g;
  const Tensor G = chain_prefix(comm, chain.reversed(), passing, kind, Mt, dS_in, g_end);
  g.dE = G;
  if (kind == TransitionKind::ScalarLog) {
    const Tensor dot = ops::sum(ops::sum(ops::mul(G, S_in), 3), 2);  // [n, H]
    g.dM = ops::mul(dot, ops::unary(ops::Unary::Exp, M));
  } else {
    const Shape& s = S_in.shape();
    g.dM = ops::matmul(G.reshape({s[0] * s[1], s[2], s[3]}), S_in.reshape({s[0] * s[1], s[2], s[3]}), false, true)
               .view({s[0], s[1], s[2], s[2]});
  }
  g.dstart = ops::add(apply(kind, Mt, G), dS_in);
  return g;
}

Tensor rows(const Tensor& t, int slot, int64_t B) { return t.slice(0, slot * B, (slot + 1) * B).contiguous(); }

}  // namespace

ag::Var incoming_state(Communicator& comm, SequenceLayout layout, StatePassing passing, const ag::Var& final_from_zero,
                       const ag::Var& transition, const ag::Var& initial) {
  const Tensor& E = final_from_zero->value;
  const TransitionKind kind = transition_kind(transition->value, E);
  const std::vector<Chain> chains = chains_of(layout, comm.size());
  const int64_t R = E.size(0), B = R / int64_t(chains.size());
  PRIMER_CHECK(R % int64_t(chains.size()) == 0, "state passing: {} chunk rows for {} chunks per rank", R,
               chains.size());
  PRIMER_CHECK(transition->value.dtype() == E.dtype(), "state passing: transition {} and state {} differ in dtype",
               dtype_name(transition->value.dtype()), dtype_name(E.dtype()));
  if (initial)
    PRIMER_CHECK(
        initial->value.shape() == Shape({B, E.size(1), E.size(2), E.size(3)}) && initial->value.dtype() == E.dtype(),
        "state passing: the initial state must be [{}, {}, {}, {}] {}", B, E.size(1), E.size(2), E.size(3),
        dtype_name(E.dtype()));

  // Chain c starts from the initial state (c = 0) or from the end of chain c−1, which the rank that ends it (the
  // first rank of chain c) computes locally.
  Tensor S_in = empty_like(E);
  std::vector<Tensor> Ms, S_ins;
  Tensor start = initial && comm.rank() == chains[0].rank_at(0) ? initial->value : Tensor();
  for (size_t c = 0; c < chains.size(); ++c) {
    const Tensor M = rows(transition->value, chains[c].slot, B), Ec = rows(E, chains[c].slot, B);
    const Tensor s = chain_prefix(comm, chains[c], passing, kind, M, Ec, start);
    S_in.slice(0, chains[c].slot * B, (chains[c].slot + 1) * B).copy_from(s);
    Ms.push_back(M);
    S_ins.push_back(s);
    const bool ends_chain = chains[c].position(comm.rank()) == chains[c].ranks - 1;
    start = ends_chain ? ops::add(apply(kind, M, s), Ec) : Tensor();
  }
  ag::Var out = ag::constant(S_in, "incoming state");
  const ag::Var E_var = final_from_zero, M_var = transition, init = initial;
  ag::record_collective(
      "sp_incoming_state", {out}, [&comm, layout, passing, kind, chains, B, Ms, S_ins, out, E_var, M_var, init]() {
        const Tensor dS = ag::grad_or_zeros(out);
        Tensor dE = Tensor::zeros(E_var->value.shape(), dS.dtype(), dS.device());
        Tensor dM = Tensor::zeros(M_var->value.shape(), dS.dtype(), dS.device());
        Tensor g_end;  // the gradient of the state leaving chain c, held by the rank that ends it
        for (size_t c = chains.size(); c-- > 0;) {
          const int slot = chains[c].slot;
          const ChainGradients g =
              chain_prefix_backward(comm, chains[c], passing, kind, Ms[c], S_ins[c], rows(dS, slot, B), g_end);
          dE.slice(0, slot * B, (slot + 1) * B).copy_from(g.dE);
          dM.slice(0, slot * B, (slot + 1) * B).copy_from(g.dM);
          const bool starts_chain = chains[c].position(comm.rank()) == 0;
          g_end = starts_chain ? g.dstart : Tensor();
        }
        ag::accumulate_grad(E_var, dE);
        ag::accumulate_grad(M_var, dM);
        if (init) {  // the initial state enters on the first chunk's rank; the others contribute zeros
          const Tensor d_init = g_end.defined() ? g_end : Tensor::zeros(init->value.shape(), dS.dtype(), dS.device());
          ag::accumulate_grad(init, d_init);
        }
      });
  return out;
}

}  // namespace primer::parallel
