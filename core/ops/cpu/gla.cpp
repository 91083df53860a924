#include "core/ops/cpu/gla.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace primer::ops::cpu {
namespace {

template <class T> T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
template <class T> void axpy(T a, const T* x, T* y, int64_t n) {  // y += a x
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// One (batch, head): row pointers into the [B, T, H, D] tensors and the [B, T, H] gates.
struct Head {
  const GlaDims& d;
  int64_t b, h;
  int64_t row(int64_t t, int64_t width) const { return ((b * d.time + t) * d.heads + h) * width; }
  int64_t gate(int64_t t) const { return (b * d.time + t) * d.heads + h; }
  int64_t state() const { return (b * d.heads + h) * d.key_dim * d.value_dim; }
};

// Chunk c's token range and its cumulative log decay G[r] = Σ_{s≤r} g_{t0+s}.
template <class T> struct Chunk {
  int64_t t0 = 0, n = 0;
  std::vector<T> G;
  Chunk(const Head& hd, const T* g, int64_t c) : t0(c * kGlaChunk), n(std::min(kGlaChunk, hd.d.time - c * kGlaChunk)) {
    G.resize(size_t(n));
    T acc = 0;
    for (int64_t r = 0; r < n; ++r) G[size_t(r)] = acc += g[hd.gate(t0 + r)];
  }
  T last() const { return G[size_t(n - 1)]; }
  T decay(int64_t r, int64_t j) const { return std::exp(G[size_t(r)] - G[size_t(j)]); }  // e^{G_r − G_j}, j ≤ r
};

// S ← e^{G_L} S + Σ_j e^{G_L − G_j} k_j v_jᵀ: the state at the end of the chunk.
template <class T> void advance_state(const Head& hd, const Chunk<T>& ch, const T* k, const T* v, T* S) {
  const int64_t K = hd.d.key_dim, V = hd.d.value_dim, L = ch.n - 1;
  const T total = std::exp(ch.last());
  for (int64_t i = 0; i < K * V; ++i) S[i] *= total;
  for (int64_t j = 0; j < ch.n; ++j) {
    const T* kj = k + hd.row(ch.t0 + j, K);
    const T* vj = v + hd.row(ch.t0 + j, V);
    const T w = ch.decay(L, j);
    for (int64_t i = 0; i < K; ++i) axpy(w * kj[i], vj, S + i * V, V);
  }
}

}  // namespace

template <class T> void gla_forward(const GlaDims& d, const T* q, const T* k, const T* v, const T* g, T scale,
                                    const T* state_in, T* o, T* state_out) {
  const int64_t K = d.key_dim, V = d.value_dim, chunks = gla_chunks(d);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      const Head hd{d, b, h};
      std::vector<T> S(size_t(K * V), T(0));
      if (state_in) std::copy_n(state_in + hd.state(), K * V, S.begin());
      for (int64_t c = 0; c < chunks; ++c) {
        const Chunk<T> ch(hd, g, c);
        for (int64_t r = 0; r < ch.n; ++r) {
          const T* qr = q + hd.row(ch.t0 + r, K);
          T* orow = o + hd.row(ch.t0 + r, V);
          std::fill_n(orow, V, T(0));
          for (int64_t i = 0; i < K; ++i) axpy(qr[i], S.data() + i * V, orow, V);  // Sᵀ q_r
          const T inter = std::exp(ch.G[size_t(r)]);
          for (int64_t j = 0; j < V; ++j) orow[j] *= inter;
          for (int64_t j = 0; j <= r; ++j)
            axpy(ch.decay(r, j) * dot(qr, k + hd.row(ch.t0 + j, K), K), v + hd.row(ch.t0 + j, V), orow, V);
          for (int64_t j = 0; j < V; ++j) orow[j] *= scale;
        }
        advance_state(hd, ch, k, v, S.data());
      }
      if (state_out) std::copy(S.begin(), S.end(), state_out + hd.state());
    }
}

template <class T> void gla_backward(const GlaDims& d, const T* dout, const T* q, const T* k, const T* v, const T* g,
                                     T scale, const T* state_in, const T* dstate_out, T* dq, T* dk, T* dv, T* dg,
                                     T* dstate_in) {
  const int64_t K = d.key_dim, V = d.value_dim, KV = K * V, chunks = gla_chunks(d);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      const Head hd{d, b, h};
      // The state at the start of every chunk, recomputed: states[c] (c < chunks).
      std::vector<T> states(size_t(std::max<int64_t>(chunks, 1) * KV), T(0));
      if (state_in) std::copy_n(state_in + hd.state(), KV, states.begin());
      for (int64_t c = 0; c + 1 < chunks; ++c) {
        std::copy_n(states.begin() + c * KV, KV, states.begin() + (c + 1) * KV);
        advance_state(hd, Chunk<T>(hd, g, c), k, v, states.data() + (c + 1) * KV);
      }
      // dE: the gradient wrt the state at the end of the current chunk, carried backwards.
      std::vector<T> dE(size_t(KV), T(0));
      if (dstate_out) std::copy_n(dstate_out + hd.state(), KV, dE.begin());
      std::vector<T> A(static_cast<size_t>(kGlaChunk * kGlaChunk)), dA(A.size()), dG(static_cast<size_t>(kGlaChunk));
      for (int64_t c = chunks - 1; c >= 0; --c) {
        const Chunk<T> ch(hd, g, c);
        const T* S0 = states.data() + c * KV;
        const int64_t n = ch.n, L = n - 1;
        auto Q = [&](int64_t r) { return q + hd.row(ch.t0 + r, K); };
        auto Kr = [&](int64_t r) { return k + hd.row(ch.t0 + r, K); };
        auto Vr = [&](int64_t r) { return v + hd.row(ch.t0 + r, V); };
        auto dO = [&](int64_t r) { return dout + hd.row(ch.t0 + r, V); };
        // A[r][j] = scale e^{G_r−G_j} (q_r·k_j), dA[r][j] = scale e^{G_r−G_j} (do_r·v_j), j ≤ r.
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j <= r; ++j) {
            const T w = scale * ch.decay(r, j);
            A[size_t(r * kGlaChunk + j)] = w * dot(Q(r), Kr(j), K);
            dA[size_t(r * kGlaChunk + j)] = w * dot(dO(r), Vr(j), V);
          }
        T last = 0;  // ∂/∂G_L of <dE, S_end>: e^{G_L} <dE, S0> + Σ_j k_j · dk_j^state
        const T total = std::exp(ch.last());
        last += total * dot(dE.data(), S0, KV);
        for (int64_t r = 0; r < n; ++r) {
          // dq_r = scale e^{G_r} S0 do_r + Σ_{j≤r} dA[r][j] k_j
          T* dqr = dq + hd.row(ch.t0 + r, K);
          const T inter = scale * std::exp(ch.G[size_t(r)]);
          for (int64_t i = 0; i < K; ++i) dqr[i] = inter * dot(S0 + i * V, dO(r), V);
          for (int64_t j = 0; j <= r; ++j) axpy(dA[size_t(r * kGlaChunk + j)], Kr(j), dqr, K);
          // dk_r = e^{G_L−G_r} dE v_r + Σ_{s≥r} dA[s][r] q_s
          T* dkr = dk + hd.row(ch.t0 + r, K);
          const T to_end = ch.decay(L, r);
          for (int64_t i = 0; i < K; ++i) dkr[i] = to_end * dot(dE.data() + i * V, Vr(r), V);
          last += dot(Kr(r), dkr, K);
          for (int64_t s = r; s < n; ++s) axpy(dA[size_t(s * kGlaChunk + r)], Q(s), dkr, K);
          // dv_r = e^{G_L−G_r} dEᵀ k_r + Σ_{s≥r} A[s][r] do_s
          T* dvr = dv + hd.row(ch.t0 + r, V);
          std::fill_n(dvr, V, T(0));
          for (int64_t i = 0; i < K; ++i) axpy(to_end * Kr(r)[i], dE.data() + i * V, dvr, V);
          for (int64_t s = r; s < n; ++s) axpy(A[size_t(s * kGlaChunk + r)], dO(s), dvr, V);
          dG[size_t(r)] = dot(Q(r), dqr, K) - dot(Kr(r), dkr, K);
        }
        // g_s enters every G_r with r ≥ s: a reverse cumulative sum, plus G_L's term.
        T suffix = last;
        for (int64_t r = n - 1; r >= 0; --r) dg[hd.gate(ch.t0 + r)] = suffix += dG[size_t(r)];
        // dE ← e^{G_L} dE + scale Σ_r e^{G_r} q_r do_rᵀ: the gradient wrt the state at the chunk's start.
        for (T& x : dE) x *= total;
        for (int64_t r = 0; r < n; ++r) {
          const T w = scale * std::exp(ch.G[size_t(r)]);
          for (int64_t i = 0; i < K; ++i) axpy(w * Q(r)[i], dO(r), dE.data() + i * V, V);
        }
      }
      if (dstate_in) std::copy(dE.begin(), dE.end(), dstate_in + hd.state());
    }
}

#define PRIMER_GLA_INSTANTIATE(T)                                                                              \
  template void gla_forward<T>(const GlaDims&, const T*, const T*, const T*, const T*, T, const T*, T*, T*);   \
  template void gla_backward<T>(const GlaDims&, const T*, const T*, const T*, const T*, const T*, T, const T*, \
                                const T*, T*, T*, T*, T*, T*);
PRIMER_GLA_INSTANTIATE(float)
PRIMER_GLA_INSTANTIATE(double)
#undef PRIMER_GLA_INSTANTIATE

}  // namespace primer::ops::cpu
