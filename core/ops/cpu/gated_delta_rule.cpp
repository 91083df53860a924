// The chunked WY algorithm of the gated delta rule on the CPU, the same maths as the CUDA kernels. Per (batch,
// head) and chunk of c ≤ 64 tokens with in-chunk cumulative log decay G_r = Σ_{s≤r} g_s, γ_r = e^{G_r}, the decay
// between rows D_rj = e^{G_r − G_j} (j ≤ r) and S the state at the chunk's start:
//   L = strictly-lower(diag(β) (K Kᵀ ⊙ D)),  A = (I + L)⁻¹,  W = A diag(βγ) K,  u = A diag(β) V
//   U = u − W S                                   (the delta rule's corrected values β_t (v_t − S'_tᵀ k_t))
//   o = scale · (diag(γ) Q S + (Q Kᵀ ⊙ D, lower incl. diagonal) U)
//   S ← γ_c S + Kᵀ diag(D_{c,·}) U
// The backward walks the chunks in reverse with ∂L/∂S at the chunk's end, recomputing the forward's A, W, u, U and
// chunk-start states; the formulas are derived in docs/mixers.md ("Gated DeltaNet").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/ops/cpu/gated_delta_rule.h"
#include "core/ops/cpu/tile_math.h"

namespace primer::ops::cpu {
namespace {

constexpr int64_t kChunk = 64;

// One chunk of one (batch, head): its inputs gathered into dense tiles and what the forward derives from them.
template <class T> struct Chunk {
  int64_t c = 0, K = 0, V = 0;
  std::vector<T> q, k, v, beta, G;  // [c, K], [c, K], [c, V], [c], [c]
  std::vector<T> A, W, u;           // [c, c], [c, K], [c, V]

  T decay(int64_t r, int64_t j) const { return std::exp(G[size_t(r)] - G[size_t(j)]); }  // j ≤ r only
  T gamma(int64_t r) const { return std::exp(G[size_t(r)]); }
  const T* q_row(int64_t r) const { return &q[size_t(r * K)]; }
  const T* k_row(int64_t r) const { return &k[size_t(r * K)]; }
  const T* v_row(int64_t r) const { return &v[size_t(r * V)]; }

  Chunk(const GatedDeltaDims& d, const T* q_in, const T* k_in, const T* v_in, const T* g_in, const T* beta_in,
        int64_t b, int64_t h, int64_t t0)
      : c(std::min(kChunk, d.time - t0)), K(d.key_dim), V(d.value_dim) {
    q.resize(size_t(c * K));
    k.resize(size_t(c * K));
    v.resize(size_t(c * V));
    beta.resize(size_t(c));
    G.resize(size_t(c));
    T cumulative = 0;
    for (int64_t r = 0; r < c; ++r) {
      const int64_t row = (b * d.time + t0 + r) * d.heads + h;
      std::memcpy(&q[size_t(r * K)], q_in + row * K, sizeof(T) * size_t(K));
      std::memcpy(&k[size_t(r * K)], k_in + row * K, sizeof(T) * size_t(K));
      std::memcpy(&v[size_t(r * V)], v_in + row * V, sizeof(T) * size_t(V));
      beta[size_t(r)] = beta_in[row];
      cumulative += g_in[row];
      G[size_t(r)] = cumulative;
    }
    // A = (I + L)⁻¹ by forward substitution, column by column: x_r = δ_rj − Σ_{s<r} L_rs x_s.
    std::vector<T> L(size_t(c * c), T(0));
    for (int64_t r = 0; r < c; ++r)
      for (int64_t j = 0; j < r; ++j) L[size_t(r * c + j)] = beta[size_t(r)] * decay(r, j) * dot(k_row(r), k_row(j), K);
    A.assign(size_t(c * c), T(0));
    for (int64_t j = 0; j < c; ++j)
      for (int64_t r = j; r < c; ++r) {
        T x = r == j ? T(1) : T(0);
        for (int64_t s = j; s < r; ++s) x -= L[size_t(r * c + s)] * A[size_t(s * c + j)];
        A[size_t(r * c + j)] = x;
      }
    std::vector<T> xw(size_t(c * K)), xu(size_t(c * V));
    for (int64_t r = 0; r < c; ++r) {
      for (int64_t i = 0; i < K; ++i) xw[size_t(r * K + i)] = beta[size_t(r)] * gamma(r) * k[size_t(r * K + i)];
      for (int64_t i = 0; i < V; ++i) xu[size_t(r * V + i)] = beta[size_t(r)] * v[size_t(r * V + i)];
    }
    W.resize(size_t(c * K));
    u.resize(size_t(c * V));
    matmul<T>(c, K, c, A.data(), c, false, xw.data(), K, false, W.data(), K, T(1), false);
    matmul<T>(c, V, c, A.data(), c, false, xu.data(), V, false, u.data(), V, T(1), false);
  }

  // U = u − W S.
  std::vector<T> corrected_values(const T* S) const {
    std::vector<T> U = u;
    matmul<T>(c, V, K, W.data(), K, false, S, V, false, U.data(), V, T(-1), true);
    return U;
  }

  // S ← γ_c S + Kᵀ diag(D_{c−1,·}) U.
  void advance(T* S, const std::vector<T>& U) const {
    const T gl = gamma(c - 1);
    for (int64_t e = 0; e < K * V; ++e) S[e] *= gl;
    std::vector<T> fu(size_t(c * V));
    for (int64_t r = 0; r < c; ++r)
      for (int64_t j = 0; j < V; ++j) fu[size_t(r * V + j)] = decay(c - 1, r) * U[size_t(r * V + j)];
    matmul<T>(K, V, c, k.data(), K, true, fu.data(), V, false, S, V, T(1), true);
  }

  // scale · (Q Kᵀ ⊙ D) on and below the diagonal: how o depends on U inside the chunk.
  std::vector<T> output_mixing(T scale) const {
    std::vector<T> P(size_t(c * c), T(0));
    for (int64_t r = 0; r < c; ++r)
      for (int64_t j = 0; j <= r; ++j) P[size_t(r * c + j)] = scale * decay(r, j) * dot(q_row(r), k_row(j), K);
    return P;
  }
};

template <class T> struct Layout {
  const GatedDeltaDims& d;
  int64_t b, h;
  int64_t row(int64_t t) const { return (b * d.time + t) * d.heads + h; }
  int64_t state() const { return (b * d.heads + h) * d.key_dim * d.value_dim; }
};

}  // namespace

template <class T> void gated_delta_rule_chunked(const GatedDeltaDims& d, const T* q, const T* k, const T* v,
                                                 const T* g, const T* beta, const T* state_in, T* o, T* state_out) {
  const int64_t K = d.key_dim, V = d.value_dim;
  const T scale = T(d.scale);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      const Layout<T> at{d, b, h};
      std::vector<T> S(size_t(K * V), T(0));
      if (state_in) std::memcpy(S.data(), state_in + at.state(), sizeof(T) * size_t(K * V));
      for (int64_t t0 = 0; t0 < d.time; t0 += kChunk) {
        const Chunk<T> ch(d, q, k, v, g, beta, b, h, t0);
        const std::vector<T> U = ch.corrected_values(S.data());
        const std::vector<T> P = ch.output_mixing(scale);
        std::vector<T> out(size_t(ch.c * V));
        matmul<T>(ch.c, V, K, ch.q.data(), K, false, S.data(), V, false, out.data(), V, T(1), false);
        for (int64_t r = 0; r < ch.c; ++r)
          for (int64_t j = 0; j < V; ++j) out[size_t(r * V + j)] *= scale * ch.gamma(r);
        matmul<T>(ch.c, V, ch.c, P.data(), ch.c, false, U.data(), V, false, out.data(), V, T(1), true);
        for (int64_t r = 0; r < ch.c; ++r)
          std::memcpy(o + at.row(t0 + r) * V, &out[size_t(r * V)], sizeof(T) * size_t(V));
        ch.advance(S.data(), U);
      }
      if (state_out) std::memcpy(state_out + at.state(), S.data(), sizeof(T) * size_t(K * V));
    }
}

template <class T> void gated_delta_rule_chunked_backward(const GatedDeltaDims& d, const T* dout, const T* q,
                                                          const T* k, const T* v, const T* g, const T* beta,
                                                          const T* state_in, const T* dstate_out, T* dq, T* dk, T* dv,
                                                          T* dg, T* dbeta, T* dstate_in) {
  const int64_t K = d.key_dim, V = d.value_dim, KV = K * V;
  const T scale = T(d.scale);
  const int64_t chunks = (d.time + kChunk - 1) / kChunk;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      const Layout<T> at{d, b, h};
      // Forward recompute: the state at each chunk's start.
      std::vector<T> starts(size_t(chunks * KV), T(0));
      if (state_in) std::memcpy(starts.data(), state_in + at.state(), sizeof(T) * size_t(KV));
      for (int64_t n = 0; n + 1 < chunks; ++n) {
        const Chunk<T> ch(d, q, k, v, g, beta, b, h, n * kChunk);
        T* S = &starts[size_t((n + 1) * KV)];
        std::memcpy(S, &starts[size_t(n * KV)], sizeof(T) * size_t(KV));
        ch.advance(S, ch.corrected_values(S));
      }
      // dS = ∂L/∂(state at the end of chunk n), walking n = last..0.
      std::vector<T> dS(size_t(KV), T(0));
      if (dstate_out) std::memcpy(dS.data(), dstate_out + at.state(), sizeof(T) * size_t(KV));
      for (int64_t n = chunks - 1; n >= 0; --n) {
        const Chunk<T> ch(d, q, k, v, g, beta, b, h, n * kChunk);
        const int64_t c = ch.c, last = c - 1;
        const T* S = &starts[size_t(n * KV)];
        const std::vector<T> U = ch.corrected_values(S);
        std::vector<T> dO(size_t(c * V));
        for (int64_t r = 0; r < c; ++r)
          std::memcpy(&dO[size_t(r * V)], dout + at.row(n * kChunk + r) * V, sizeof(T) * size_t(V));

        // ∂L/∂U = Pᵀ dO + diag(D_{c−1,·}) K dS.
        std::vector<T> dU(size_t(c * V));
        matmul<T>(c, V, K, ch.k.data(), K, false, dS.data(), V, false, dU.data(), V, T(1), false);
        for (int64_t r = 0; r < c; ++r)
          for (int64_t j = 0; j < V; ++j) dU[size_t(r * V + j)] *= ch.decay(last, r);
        const std::vector<T> P = ch.output_mixing(scale);
        matmul<T>(c, V, c, P.data(), c, true, dO.data(), V, false, dU.data(), V, T(1), true);

        // Output and state paths: dq = scale diag(γ) dO Sᵀ + Ds K, dk = diag(D_{c−1,·}) U dSᵀ + Dsᵀ Q with
        // Ds = scale (dO Uᵀ ⊙ D) on and below the diagonal. ∂L/∂G_r = dq_r·q_r − dk_r·k_r there (G enters as
        // γ_r q_r and k_j / γ_j), plus <dS, S_end> at the last row through γ_c.
        std::vector<T> Ds(size_t(c * c), T(0));
        for (int64_t r = 0; r < c; ++r)
          for (int64_t j = 0; j <= r; ++j)
            Ds[size_t(r * c + j)] = scale * ch.decay(r, j) * dot(&dO[size_t(r * V)], &U[size_t(j * V)], V);
        std::vector<T> dq_c(size_t(c * K)), dk_c(size_t(c * K)), dG(size_t(c), T(0));
        matmul<T>(c, K, V, dO.data(), V, false, S, V, true, dq_c.data(), K, T(1), false);
        for (int64_t r = 0; r < c; ++r)
          for (int64_t i = 0; i < K; ++i) dq_c[size_t(r * K + i)] *= scale * ch.gamma(r);
        matmul<T>(c, K, c, Ds.data(), c, false, ch.k.data(), K, false, dq_c.data(), K, T(1), true);
        matmul<T>(c, K, V, U.data(), V, false, dS.data(), V, true, dk_c.data(), K, T(1), false);
        T dG_end = ch.gamma(last) * dot(dS.data(), S, KV);
        for (int64_t r = 0; r < c; ++r) {
          for (int64_t i = 0; i < K; ++i) dk_c[size_t(r * K + i)] *= ch.decay(last, r);
          dG_end += dot(&dk_c[size_t(r * K)], ch.k_row(r), K);
        }
        matmul<T>(c, K, c, Ds.data(), c, true, ch.q.data(), K, false, dk_c.data(), K, T(1), true);
        for (int64_t r = 0; r < c; ++r)
          dG[size_t(r)] = dot(&dq_c[size_t(r * K)], ch.q_row(r), K) - dot(&dk_c[size_t(r * K)], ch.k_row(r), K);
        dG[size_t(last)] += dG_end;

        // ∂L/∂(state at the chunk's start), before dS is reused for it: γ_c dS + Qᵀ diag(scale γ) dO − Wᵀ dU.
        std::vector<T> dO_gamma(size_t(c * V));
        for (int64_t r = 0; r < c; ++r)
          for (int64_t j = 0; j < V; ++j) dO_gamma[size_t(r * V + j)] = scale * ch.gamma(r) * dO[size_t(r * V + j)];
        for (int64_t e = 0; e < KV; ++e) dS[size_t(e)] *= ch.gamma(last);
        matmul<T>(K, V, c, ch.q.data(), K, true, dO_gamma.data(), V, false, dS.data(), V, T(1), true);
        matmul<T>(K, V, c, ch.W.data(), K, true, dU.data(), V, false, dS.data(), V, T(-1), true);

        // WY path: U = u − W S with W = A X_w, u = A X_u, X_w = diag(βγ) K, X_u = diag(β) V, A = (I + L)⁻¹.
        std::vector<T> dW(size_t(c * K)), xw(size_t(c * K)), xu(size_t(c * V));
        matmul<T>(c, K, V, dU.data(), V, false, S, V, true, dW.data(), K, T(-1), false);
        for (int64_t r = 0; r < c; ++r) {
          const T bg = ch.beta[size_t(r)] * ch.gamma(r);
          for (int64_t i = 0; i < K; ++i) xw[size_t(r * K + i)] = bg * ch.k[size_t(r * K + i)];
          for (int64_t i = 0; i < V; ++i) xu[size_t(r * V + i)] = ch.beta[size_t(r)] * ch.v[size_t(r * V + i)];
        }
        std::vector<T> dA(size_t(c * c)), dXw(size_t(c * K)), dXu(size_t(c * V));
        matmul<T>(c, c, K, dW.data(), K, false, xw.data(), K, true, dA.data(), c, T(1), false);
        matmul<T>(c, c, V, dU.data(), V, false, xu.data(), V, true, dA.data(), c, T(1), true);
        matmul<T>(c, K, c, ch.A.data(), c, true, dW.data(), K, false, dXw.data(), K, T(1), false);
        matmul<T>(c, V, c, ch.A.data(), c, true, dU.data(), V, false, dXu.data(), V, T(1), false);
        std::vector<T> dbeta_c(static_cast<size_t>(c));
        for (int64_t r = 0; r < c; ++r) {
          const T kw = dot(&dXw[size_t(r * K)], ch.k_row(r), K);
          dbeta_c[size_t(r)] = ch.gamma(r) * kw + dot(&dXu[size_t(r * V)], ch.v_row(r), V);
          dG[size_t(r)] += ch.beta[size_t(r)] * ch.gamma(r) * kw;
          for (int64_t i = 0; i < K; ++i)
            dk_c[size_t(r * K + i)] += ch.beta[size_t(r)] * ch.gamma(r) * dXw[size_t(r * K + i)];
          for (int64_t i = 0; i < V; ++i)
            dv[at.row(n * kChunk + r) * V + i] = ch.beta[size_t(r)] * dXu[size_t(r * V + i)];
        }
        // Through the inverse: ∂L/∂L = −Aᵀ dA Aᵀ, kept strictly below the diagonal, then L_rj = β_r D_rj k_r·k_j.
        std::vector<T> tmp(size_t(c * c)), dL(size_t(c * c)), Dl(size_t(c * c), T(0));
        matmul<T>(c, c, c, dA.data(), c, false, ch.A.data(), c, true, tmp.data(), c, T(1), false);
        matmul<T>(c, c, c, ch.A.data(), c, true, tmp.data(), c, false, dL.data(), c, T(-1), false);
        for (int64_t r = 0; r < c; ++r)
          for (int64_t j = 0; j < r; ++j) {
            const T dl = dL[size_t(r * c + j)], kk = ch.decay(r, j) * dot(ch.k_row(r), ch.k_row(j), K);
            dbeta_c[size_t(r)] += dl * kk;
            dG[size_t(r)] += dl * ch.beta[size_t(r)] * kk;
            dG[size_t(j)] -= dl * ch.beta[size_t(r)] * kk;
            Dl[size_t(r * c + j)] = dl * ch.beta[size_t(r)] * ch.decay(r, j);
          }
        matmul<T>(c, K, c, Dl.data(), c, false, ch.k.data(), K, false, dk_c.data(), K, T(1), true);
        matmul<T>(c, K, c, Dl.data(), c, true, ch.k.data(), K, false, dk_c.data(), K, T(1), true);

        // g_t enters every G_r with r ≥ t in its chunk.
        T suffix = 0;
        for (int64_t r = c - 1; r >= 0; --r) {
          suffix += dG[size_t(r)];
          const int64_t row = at.row(n * kChunk + r);
          dg[row] = suffix;
          dbeta[row] = dbeta_c[size_t(r)];
          std::memcpy(dq + row * K, &dq_c[size_t(r * K)], sizeof(T) * size_t(K));
          std::memcpy(dk + row * K, &dk_c[size_t(r * K)], sizeof(T) * size_t(K));
        }
      }
      if (dstate_in) std::memcpy(dstate_in + at.state(), dS.data(), sizeof(T) * size_t(KV));
    }
}

#define PRIMER_GATED_DELTA_INSTANTIATE(T)                                                                            \
  template void gated_delta_rule_chunked<T>(const GatedDeltaDims&, const T*, const T*, const T*, const T*, const T*, \
                                            const T*, T*, T*);                                                       \
  template void gated_delta_rule_chunked_backward<T>(const GatedDeltaDims&, const T*, const T*, const T*, const T*,  \
                                                     const T*, const T*, const T*, const T*, T*, T*, T*, T*, T*, T*);
PRIMER_GATED_DELTA_INSTANTIATE(float)
PRIMER_GATED_DELTA_INSTANTIATE(double)
#undef PRIMER_GATED_DELTA_INSTANTIATE

}  // namespace primer::ops::cpu
