// The gated delta rule token by token in f64, straight from the recurrence (per batch b and head h):
//   S'_t = e^{g_t} S_{t−1};   u_t = β_t (v_t − S'_tᵀ k_t);   S_t = S'_t + k_t u_tᵀ;   o_t = scale · S_tᵀ q_t
// and its backward, the same steps in reverse order (every state S_t is kept: the reference runs on small sizes).
#include <cmath>
#include <cstring>
#include <vector>

#include "core/ops/cpu/gated_delta_rule.h"

namespace primer::ops::cpu {
namespace {

// Offsets of one (batch, head) sequence in the dense layouts.
struct Head {
  const GatedDeltaDims& d;
  int64_t b, h;
  int64_t qk(int64_t t) const { return ((b * d.time + t) * d.heads + h) * d.key_dim; }
  int64_t vo(int64_t t) const { return ((b * d.time + t) * d.heads + h) * d.value_dim; }
  int64_t gate(int64_t t) const { return (b * d.time + t) * d.heads + h; }
  int64_t state() const { return (b * d.heads + h) * d.key_dim * d.value_dim; }
};

// One step S_{t−1} → S_t in place: S ← e^g S, then S += k (β (v − Sᵀk))ᵀ.
void step(double* S, int64_t K, int64_t V, const double* k, const double* v, double g, double beta) {
  const double a = std::exp(g);
  for (int64_t i = 0; i < K * V; ++i) S[i] *= a;
  for (int64_t j = 0; j < V; ++j) {
    double r = 0;
    for (int64_t i = 0; i < K; ++i) r += S[i * V + j] * k[i];
    const double u = beta * (v[j] - r);
    for (int64_t i = 0; i < K; ++i) S[i * V + j] += k[i] * u;
  }
}

}  // namespace

void gated_delta_rule_reference(const GatedDeltaDims& d, const double* q, const double* k, const double* v,
                                const double* g, const double* beta, const double* state_in, double* o,
                                double* state_out) {
  const int64_t K = d.key_dim, V = d.value_dim;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      const Head at{d, b, h};
      std::vector<double> S(static_cast<size_t>(K * V), 0.0);
      if (state_in) std::memcpy(S.data(), state_in + at.state(), sizeof(double) * size_t(K * V));
      for (int64_t t = 0; t < d.time; ++t) {
        step(S.data(), K, V, k + at.qk(t), v + at.vo(t), g[at.gate(t)], beta[at.gate(t)]);
        for (int64_t j = 0; j < V; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < K; ++i) acc += S[size_t(i * V + j)] * q[at.qk(t) + i];
          o[at.vo(t) + j] = d.scale * acc;
        }
      }
      if (state_out) std::memcpy(state_out + at.state(), S.data(), sizeof(double) * size_t(K * V));
    }
}

void gated_delta_rule_reference_backward(const GatedDeltaDims& d, const double* dout, const double* q, const double* k,
                                         const double* v, const double* g, const double* beta, const double* state_in,
                                         const double* dstate_out, double* dq, double* dk, double* dv, double* dg,
                                         double* dbeta, double* dstate_in) {
  const int64_t K = d.key_dim, V = d.value_dim, KV = K * V;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      const Head at{d, b, h};
      // states[t] = S_t for t = 0..T (S_0 the initial state).
      std::vector<double> states(size_t((d.time + 1) * KV), 0.0);
      if (state_in) std::memcpy(states.data(), state_in + at.state(), sizeof(double) * size_t(KV));
      for (int64_t t = 0; t < d.time; ++t) {
        std::memcpy(&states[size_t((t + 1) * KV)], &states[size_t(t * KV)], sizeof(double) * size_t(KV));
        step(&states[size_t((t + 1) * KV)], K, V, k + at.qk(t), v + at.vo(t), g[at.gate(t)], beta[at.gate(t)]);
      }
      // dS = ∂L/∂S_t, walking t = T..1.
      std::vector<double> dS(static_cast<size_t>(KV), 0.0), Sp(static_cast<size_t>(KV)), u(static_cast<size_t>(V)),
          dr(static_cast<size_t>(V));
      if (dstate_out) std::memcpy(dS.data(), dstate_out + at.state(), sizeof(double) * size_t(KV));
      for (int64_t t = d.time - 1; t >= 0; --t) {
        const double* S = &states[size_t((t + 1) * KV)];
        const double* S_prev = &states[size_t(t * KV)];
        const double* qt = q + at.qk(t);
        const double* kt = k + at.qk(t);
        const double* vt = v + at.vo(t);
        const double* dot = dout + at.vo(t);
        const double a = std::exp(g[at.gate(t)]), bt = beta[at.gate(t)];
        // o_t = scale · S_tᵀ q_t
        for (int64_t i = 0; i < K; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < V; ++j) acc += S[i * V + j] * dot[j];
          dq[at.qk(t) + i] = d.scale * acc;
          for (int64_t j = 0; j < V; ++j) dS[size_t(i * V + j)] += d.scale * qt[i] * dot[j];
        }
        // S_t = S' + k uᵀ with u = β (v − r), r = S'ᵀ k and S' = a S_{t−1}.
        for (int64_t i = 0; i < KV; ++i) Sp[size_t(i)] = a * S_prev[i];
        double dbeta_t = 0;
        for (int64_t j = 0; j < V; ++j) {
          double r = 0, du = 0;
          for (int64_t i = 0; i < K; ++i) {
            r += Sp[size_t(i * V + j)] * kt[i];
            du += dS[size_t(i * V + j)] * kt[i];  // ∂L/∂u_j = (dSᵀ k)_j
          }
          u[size_t(j)] = bt * (vt[j] - r);
          dbeta_t += du * (vt[j] - r);
          dv[at.vo(t) + j] = bt * du;
          dr[size_t(j)] = -bt * du;  // ∂L/∂r_j
        }
        dbeta[at.gate(t)] = dbeta_t;
        // ∂L/∂k from k uᵀ (dS u) and from r = S'ᵀ k (S' dr).
        for (int64_t i = 0; i < K; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < V; ++j)
            acc += dS[size_t(i * V + j)] * u[size_t(j)] + Sp[size_t(i * V + j)] * dr[size_t(j)];
          dk[at.qk(t) + i] = acc;
        }
        // dS' = dS + k drᵀ; S' = a S_{t−1}: ∂L/∂g = a <dS', S_{t−1}>, ∂L/∂S_{t−1} = a dS'.
        double da = 0;
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) {
            const size_t e = size_t(i * V + j);
            const double dSp = dS[e] + kt[i] * dr[size_t(j)];
            da += dSp * S_prev[e];
            dS[e] = a * dSp;
          }
        dg[at.gate(t)] = a * da;
      }
      if (dstate_in) std::memcpy(dstate_in + at.state(), dS.data(), sizeof(double) * size_t(KV));
    }
}

}  // namespace primer::ops::cpu
