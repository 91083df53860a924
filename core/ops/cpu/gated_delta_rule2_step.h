// One token of the gated delta rule-2 for one (batch, head), forward and reverse, straight from the recurrence
// (core/ops/gated_delta_rule2.h): the reference runs it in f64 over whole sequences (the chunked path has its own
// per-chunk backward, gated_delta_rule2.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace primer::ops::cpu {

// The token's inputs: q, k, g, b rows of K, v, w rows of V.
template <class T> struct Gdn2Token { const T *q, *k, *v, *g, *b, *w; };

// S [K, V] ← S_t from S_{t−1}: S̄ = Diag(e^g) S, then S̄ + k (w⊙v − S̄ᵀ(b⊙k))ᵀ; o (if non-null) = scale · S_tᵀ q.
template <class T> void gdn2_step(T* S, int64_t K, int64_t V, const Gdn2Token<T>& x, T scale, T* o) {
  for (int64_t i = 0; i < K; ++i) {
    const T a = std::exp(x.g[i]);
    for (int64_t j = 0; j < V; ++j) S[i * V + j] *= a;
  }
  for (int64_t j = 0; j < V; ++j) {
    T r = 0;
    for (int64_t i = 0; i < K; ++i) r += S[i * V + j] * x.b[i] * x.k[i];
    const T rho = x.w[j] * x.v[j] - r;
    for (int64_t i = 0; i < K; ++i) S[i * V + j] += x.k[i] * rho;
  }
  if (o)
    for (int64_t j = 0; j < V; ++j) {
      T acc = 0;
      for (int64_t i = 0; i < K; ++i) acc += S[i * V + j] * x.q[i];
      o[j] = scale * acc;
    }
}

// The token's gradients (written to dq, dk, dg, db [K] and dv, dw [V]) from dout [V] and dS = ∂L/∂S_t [K, V], which
// becomes ∂L/∂S_{t−1}. S_prev is S_{t−1}; `work` is scratch. With S̄ = Diag(α) S_prev, e = b⊙k, z = w⊙v,
// ρ = z − S̄ᵀe and S_t = S̄ + kρᵀ:
//   dq = scale S_t dout;  dS += scale q doutᵀ;  dk = dS ρ;  dρ = dSᵀk (dz = dρ, dr = −dρ);
//   dS̄ = dS + e drᵀ;  de = S̄ dr (db = de⊙k, dk += de⊙b);  dw = dz⊙v, dv = dz⊙w;
//   dg_i = α_i Σ_j dS̄_ij S_prev,ij;  dS_{t−1} = Diag(α) dS̄.
template <class T> void gdn2_step_backward(T* dS, const T* S_prev, int64_t K, int64_t V, const Gdn2Token<T>& x, T scale,
                                           const T* dout, T* dq, T* dk, T* dv, T* dg, T* db, T* dw,
                                           std::vector<T>& work) {
  work.resize(size_t(K * V + 2 * V));
  T* Sb = work.data();  // S̄, then S_t
  T* rho = Sb + K * V;
  T* drho = rho + V;
  for (int64_t i = 0; i < K; ++i) {
    const T a = std::exp(x.g[i]);
    for (int64_t j = 0; j < V; ++j) Sb[i * V + j] = a * S_prev[i * V + j];
  }
  for (int64_t j = 0; j < V; ++j) {
    T r = 0;
    for (int64_t i = 0; i < K; ++i) r += Sb[i * V + j] * x.b[i] * x.k[i];
    rho[j] = x.w[j] * x.v[j] - r;
  }
  // o = scale S_tᵀ q: dq from S_t = S̄ + kρᵀ, and q doutᵀ into dS.
  for (int64_t i = 0; i < K; ++i) {
    T acc = 0;
    for (int64_t j = 0; j < V; ++j) {
      acc += (Sb[i * V + j] + x.k[i] * rho[j]) * dout[j];
      dS[i * V + j] += scale * x.q[i] * dout[j];
    }
    dq[i] = scale * acc;
  }
  for (int64_t j = 0; j < V; ++j) {
    T acc = 0;
    for (int64_t i = 0; i < K; ++i) acc += dS[i * V + j] * x.k[i];
    drho[j] = acc;
    dw[j] = acc * x.v[j];
    dv[j] = acc * x.w[j];
  }
  for (int64_t i = 0; i < K; ++i) {
    const T a = std::exp(x.g[i]), e = x.b[i] * x.k[i];
    T dk_i = 0, de = 0, da = 0;
    for (int64_t j = 0; j < V; ++j) {
      dk_i += dS[i * V + j] * rho[j];
      de -= Sb[i * V + j] * drho[j];              // S̄ dr with dr = −dρ
      const T dSb = dS[i * V + j] - e * drho[j];  // dS + e drᵀ
      da += dSb * S_prev[i * V + j];
      dS[i * V + j] = a * dSb;
    }
    db[i] = de * x.k[i];
    dk[i] = dk_i + de * x.b[i];
    dg[i] = a * da;
  }
}

}  // namespace primer::ops::cpu
