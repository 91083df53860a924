#include "core/ops/cpu/chebyshev_solve.h"

#include <algorithm>
#include <cmath>
#include <vector>

// Notation: a chunk holds rows c = 0 .. len−1 (tokens start + c), G_c = Σ_{i≤c} gk_i its local
// cumulative log-decay, ζ_c = e^{G_c}, H_0 the state before its first token, and
//   H_c = ζ_c H_0 + Σ_{j≤c} e^{G_c−G_j} k_j k_jᵀ.
// Everything the solve and its gradient need from H_c is reached through H_0 and the chunk's keys.
namespace primer::ops::cpu {
namespace {

// Addressing of one (batch, head) in the [B, T, H, D], [B, T, H] and [B, H, D, D] buffers.
struct Head {
  const ChebyshevDims& d;
  int64_t b, h;
  int64_t token(int64_t t) const { return ((b * d.time + t) * d.heads + h) * d.dim; }
  int64_t gate(int64_t t) const { return (b * d.time + t) * d.heads + h; }
  int64_t state() const { return (b * d.heads + h) * d.dim * d.dim; }
};

template <class T> T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <class T> class Chunk {
 public:
  Chunk(const Head& head, int64_t n, const T* k, const T* gk, const T* H0)
      : head_(head),
        D_(head.d.dim),
        start_(n * ChebyshevDims::kChunk),
        len_(std::min(ChebyshevDims::kChunk, head.d.time - start_)),
        H0_(H0),
        K_(gather(k)),
        G_(size_t(len_)),
        F_(size_t(len_)) {
    T cum = 0;
    for (int64_t c = 0; c < len_; ++c) G_[size_t(c)] = cum += gk ? gk[head.gate(start_ + c)] : T(0);
    frobenius_norms();
  }

  int64_t len() const { return len_; }
  int64_t D() const { return D_; }
  T G(int64_t c) const { return G_[size_t(c)]; }
  T F(int64_t c) const { return F_[size_t(c)]; }
  T zeta(int64_t c) const { return std::exp(G_[size_t(c)]); }
  T decay(int64_t c, int64_t j) const { return std::exp(G_[size_t(c)] - G_[size_t(j)]); }  // e^{G_c − G_j}
  const T* key(int64_t c) const { return K_.data() + c * D_; }
  const T* H0() const { return H0_; }

  // The chunk's rows of a [B, T, H, D] buffer, dense [len][D]; and back.
  std::vector<T> gather(const T* src) const {
    std::vector<T> rows(static_cast<size_t>(len_ * D_));
    for (int64_t c = 0; c < len_; ++c) std::copy_n(src + head_.token(start_ + c), D_, rows.data() + c * D_);
    return rows;
  }
  void scatter(const std::vector<T>& rows, T* dst) const {
    for (int64_t c = 0; c < len_; ++c) std::copy_n(rows.data() + c * D_, D_, dst + head_.token(start_ + c));
  }
  int64_t gate(int64_t c) const { return head_.gate(start_ + c); }

  // Y_c = H_c X_c for every row: ζ_c H_0 x_c + Σ_{j≤c} e^{G_c−G_j} (k_j·x_c) k_j (the rows' form of
  // e^{G}⊙(X H_0ᵀ) + ((X Kᵀ)⊙Mᵀ) K).
  void matvec(const std::vector<T>& X, std::vector<T>& Y) const {
    Y.assign(size_t(len_ * D_), T(0));
    for (int64_t c = 0; c < len_; ++c) {
      const T* x = X.data() + c * D_;
      T* y = Y.data() + c * D_;
      const T z = zeta(c);
      for (int64_t i = 0; i < D_; ++i) y[i] = z * dot(H0_ + i * D_, x, D_);
      for (int64_t j = 0; j <= c; ++j) {
        const T p = decay(c, j) * dot(key(j), x, D_);
        for (int64_t i = 0; i < D_; ++i) y[i] += p * key(j)[i];
      }
    }
  }

  // X_c = CH(H_c + λ_c I, R_c) for every row, λ_c = ridge·F_c; a row with F_c = 0 gets 0 (see the reference).
  void solve(const std::vector<T>& R, int64_t num_iter, double ridge, std::vector<T>& X) const {
    const T rho = T(chebyshev_rho(ridge));
    std::vector<T> step(static_cast<size_t>(len_)), lambda(static_cast<size_t>(len_));
    for (int64_t c = 0; c < len_; ++c) {
      step[size_t(c)] = F(c) > 0 ? T(2) / (T(1 + 2 * ridge) * F(c)) : T(0);
      lambda[size_t(c)] = T(ridge) * F(c);
    }
    std::vector<T> prev(static_cast<size_t>(len_ * D_), T(0)), next(static_cast<size_t>(len_ * D_)), Y;
    X.resize(size_t(len_ * D_));
    for (int64_t e = 0; e < len_ * D_; ++e) X[size_t(e)] = step[size_t(e / D_)] * R[size_t(e)];
    T omega = 2;
    for (int64_t it = 0; it < num_iter; ++it) {
      omega = T(4) / (T(4) - rho * rho * omega);
      matvec(X, Y);
      for (int64_t e = 0; e < len_ * D_; ++e) {
        const int64_t c = e / D_;
        const T residual = Y[size_t(e)] + lambda[size_t(c)] * X[size_t(e)] - R[size_t(e)];
        next[size_t(e)] =
            X[size_t(e)] - step[size_t(c)] * omega * residual + (omega - 1) * (X[size_t(e)] - prev[size_t(e)]);
      }
      prev.swap(X);
      X.swap(next);
    }
  }

  // The state after the chunk's last token: ζ_L H_0 + Σ_j e^{G_L−G_j} k_j k_jᵀ.
  void advance(T* H_end) const {
    const int64_t L = len_ - 1;
    for (int64_t e = 0; e < D_ * D_; ++e) H_end[e] = zeta(L) * H0_[e];
    for (int64_t j = 0; j < len_; ++j) {
      const T m = decay(L, j);
      for (int64_t i = 0; i < D_; ++i)
        for (int64_t l = 0; l < D_; ++l) H_end[i * D_ + l] += m * key(j)[i] * key(j)[l];
    }
  }

 private:
  // ‖H_c‖_F² by Eq. (5): ζ_c²‖H_0‖² + 2ζ_c Σ_{j≤c} e^{G_c−G_j} k_jᵀH_0k_j + ‖S_c‖², with the in-chunk part
  // S_c = Σ_{j≤c} e^{G_c−G_j} k_j k_jᵀ — whose norm Eq. (5) writes as Σ_{i,j≤c} e^{2G_c−G_i−G_j}(k_i·k_j)² —
  // taken by the recursion ‖S_c‖² = e^{2gk_c}‖S_{c−1}‖² + (k_c·k_c)² + 2 Σ_{j<c} e^{G_c−G_j}(k_c·k_j)² (O(C²), not
  // O(C³)). Every term is ≥ 0 for a PSD H_0: no cancellation.
  void frobenius_norms() {
    const T h0 = dot(H0_, H0_, D_ * D_);
    std::vector<T> quad(static_cast<size_t>(len_)), Hk(static_cast<size_t>(D_));
    for (int64_t j = 0; j < len_; ++j) {
      for (int64_t i = 0; i < D_; ++i) Hk[size_t(i)] = dot(H0_ + i * D_, key(j), D_);
      quad[size_t(j)] = dot(key(j), Hk.data(), D_);
    }
    T intra = 0;
    for (int64_t c = 0; c < len_; ++c) {
      T cross = 0, fresh = 0;
      for (int64_t j = 0; j <= c; ++j) {
        cross += decay(c, j) * quad[size_t(j)];
        const T gram = dot(key(c), key(j), D_);
        fresh += (j == c ? T(1) : T(2) * decay(c, j)) * gram * gram;
      }
      const T carried = c > 0 ? decay(c, c - 1) : T(0);
      intra = carried * carried * intra + fresh;
      F_[size_t(c)] = std::sqrt(std::max(T(0), zeta(c) * zeta(c) * h0 + 2 * zeta(c) * cross + intra));
    }
  }

  const Head& head_;
  int64_t D_, start_, len_;
  const T* H0_;
  std::vector<T> K_, G_, F_;
};

template <class T> void load_state(const Head& head, const T* src, T* dst) {
  const int64_t DD = head.d.dim * head.d.dim;
  if (src)
    std::copy_n(src + head.state(), DD, dst);
  else
    std::fill_n(dst, DD, T(0));
}

// One chunk of the backward, given s = dq (the adjoint solve), x and the state gradient `adj` arriving from after
// the chunk (the gradient wrt its last H_c). Writes the chunk's dk and dgk and turns `adj` into the gradient wrt
// H_0. The local state gradient of row t is dH_t = −s_t x_tᵀ − ½ w_t H_t, w_t = [bp_lambda] 2·ridge·(x_t·s_t)/F_t;
// the in-chunk adjoint is H̄_t = Σ_{t'≥t} e^{G_t'−G_t} dH_t' + e^{G_L−G_t} adj. Then (§3.3 (c)):
//   dk_t = (H̄_t + H̄_tᵀ) k_t = −Σ_{t'≥t} e^{G_t'−G_t} [(x_t'·k_t) s_t' + (s_t'·k_t) x_t']          (A-part)
//          − ζ_t W_t · ½(H_0 + H_0ᵀ) k_t − Σ_j e^{2G_m−G_t−G_j} W_m (k_t·k_j) k_j,  m = max(t, j)   (B-part)
//          + e^{G_L−G_t} (adj + adjᵀ) k_t                                                          (from later chunks)
// with W_m = Σ_{t'≥m} w_t' e^{2(G_t'−G_m)} (W_m = w_m + e^{2gk_{m+1}} W_{m+1}: every exponent ≤ 0 for decays ≤ 0),
// the closed form of the nested B-recursion whose in-chunk mask M diag(w) Mᵀ is full, not triangular.
// The gate: with D_t the direct gradient wrt H_t (dH_t, plus adj at t = L), dL/dG_t = ⟨D_t, H_t⟩ − k_tᵀH̄_tk_t
// = −s_t·(H_t x_t) − ½ w_t F_t² + [t = L]⟨adj, H_L⟩ − ½ k_t·dk_t, and dgk_t = Σ_{i≥t} dL/dG_i (G_i sums gk_t..).
// Finally adj ← ζ_L adj + Σ_t ζ_t dH_t = ζ_L adj − Σ_t ζ_t s_t x_tᵀ − ½ζ_0²W_0 H_0 − ½ Σ_j ζ_j W_j k_j k_jᵀ.
template <class T> void chunk_backward(const ChebyshevDims& d, const Chunk<T>& ch, const std::vector<T>& S,
                                       const std::vector<T>& X, const T* H_end, std::vector<T>& adj, T* dk, T* dgk) {
  const int64_t D = d.dim, len = ch.len(), L = len - 1;
  const T ridge = T(d.ridge);
  std::vector<T> w(static_cast<size_t>(len)), W(static_cast<size_t>(len)), local(static_cast<size_t>(len), T(0)), HX;
  for (int64_t c = 0; c < len; ++c)
    w[size_t(c)] = d.bp_lambda && ch.F(c) > 0 ? 2 * ridge * dot(X.data() + c * D, S.data() + c * D, D) / ch.F(c) : T(0);
  for (int64_t m = L; m >= 0; --m) {
    const T carried = m < L ? ch.decay(m + 1, m) : T(0);
    W[size_t(m)] = w[size_t(m)] + (m < L ? carried * carried * W[size_t(m + 1)] : T(0));
  }
  if (d.num_iter > 0) {
    ch.matvec(X, HX);
    for (int64_t c = 0; c < len; ++c)
      local[size_t(c)] = -dot(S.data() + c * D, HX.data() + c * D, D) - w[size_t(c)] * ch.F(c) * ch.F(c) / 2;
  }

  std::vector<T> dK(static_cast<size_t>(len * D), T(0)), h0k(static_cast<size_t>(D)), adjk(static_cast<size_t>(D));
  const T* H0 = ch.H0();
  for (int64_t t = 0; t < len; ++t) {
    const T* kt = ch.key(t);
    T* out = dK.data() + t * D;
    for (int64_t tp = t; tp < len; ++tp) {
      const T m = ch.decay(tp, t);
      const T* s = S.data() + tp * D;
      const T* x = X.data() + tp * D;
      const T xk = m * dot(x, kt, D), sk = m * dot(s, kt, D);
      for (int64_t i = 0; i < D; ++i) out[i] -= xk * s[i] + sk * x[i];
    }
    for (int64_t i = 0; i < D; ++i) {
      T a = 0, b = 0;
      for (int64_t j = 0; j < D; ++j) {
        a += (H0[i * D + j] + H0[j * D + i]) * kt[j];
        b += (adj[size_t(i * D + j)] + adj[size_t(j * D + i)]) * kt[j];
      }
      h0k[size_t(i)] = a / 2;
      adjk[size_t(i)] = b;
    }
    const T b_t = ch.zeta(t) * W[size_t(t)], cross = ch.decay(L, t);
    for (int64_t i = 0; i < D; ++i) out[i] += cross * adjk[size_t(i)] - b_t * h0k[size_t(i)];
    for (int64_t j = 0; j < len; ++j) {
      const int64_t m = std::max(t, j);
      const T coef = std::exp(2 * ch.G(m) - ch.G(t) - ch.G(j)) * W[size_t(m)] * dot(kt, ch.key(j), D);
      for (int64_t i = 0; i < D; ++i) out[i] -= coef * ch.key(j)[i];
    }
  }
  ch.scatter(dK, dk);

  if (dgk) {
    T suffix = dot(adj.data(), H_end, D * D);  // the t = L term ⟨adj, H_L⟩
    for (int64_t t = L; t >= 0; --t) {
      suffix += local[size_t(t)] - dot(ch.key(t), dK.data() + t * D, D) / 2;
      dgk[ch.gate(t)] = suffix;
    }
  }

  const T zL = ch.zeta(L), w0 = ch.zeta(0) * ch.zeta(0) * W[0];
  for (int64_t e = 0; e < D * D; ++e) adj[size_t(e)] = zL * adj[size_t(e)] - w0 * H0[e] / 2;
  for (int64_t t = 0; t < len; ++t) {
    const T z = ch.zeta(t), half_b = z * W[size_t(t)] / 2;
    const T *s = S.data() + t * D, *x = X.data() + t * D, *kt = ch.key(t);
    for (int64_t i = 0; i < D; ++i)
      for (int64_t j = 0; j < D; ++j) adj[size_t(i * D + j)] -= z * s[i] * x[j] + half_b * kt[i] * kt[j];
  }
}

}  // namespace

template <class T> void chebyshev_solve(const ChebyshevDims& d, const T* q, const T* k, const T* gk, const T* state_in,
                                        T* x, T* state_out) {
  const int64_t DD = d.dim * d.dim;
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < d.heads_total(); ++bh) {
    const Head head{d, bh / d.heads, bh % d.heads};
    std::vector<T> H(static_cast<size_t>(DD)), H_next(static_cast<size_t>(DD)), X;
    load_state(head, state_in, H.data());
    for (int64_t n = 0; n < d.chunks(); ++n) {
      const Chunk<T> ch(head, n, k, gk, H.data());
      if (d.num_iter == 0) {
        ch.scatter(ch.gather(q), x);
      } else {
        ch.solve(ch.gather(q), d.num_iter, d.ridge, X);
        ch.scatter(X, x);
      }
      ch.advance(H_next.data());
      H.swap(H_next);
    }
    if (state_out) std::copy_n(H.data(), DD, state_out + head.state());
  }
}

template <class T> void chebyshev_solve_backward(const ChebyshevDims& d, const T* dx, const T* x, const T* k,
                                                 const T* gk, const T* state_in, const T* dstate_out, T* dq, T* dk,
                                                 T* dgk, T* dstate_in) {
  const int64_t DD = d.dim * d.dim, N = d.chunks();
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < d.heads_total(); ++bh) {
    const Head head{d, bh / d.heads, bh % d.heads};
    std::vector<T> states(static_cast<size_t>((N + 1) * DD));  // the state before chunk n, and after the last
    load_state(head, state_in, states.data());
    for (int64_t n = 0; n < N; ++n)
      Chunk<T>(head, n, k, gk, states.data() + n * DD).advance(states.data() + (n + 1) * DD);
    std::vector<T> adj(static_cast<size_t>(DD)), S;
    load_state(head, dstate_out, adj.data());
    for (int64_t n = N - 1; n >= 0; --n) {
      const Chunk<T> ch(head, n, k, gk, states.data() + n * DD);
      const std::vector<T> DX = ch.gather(dx);
      if (d.num_iter == 0) {
        ch.scatter(DX, dq);
        S.assign(DX.size(), T(0));  // x = q does not depend on the state
      } else {
        ch.solve(DX, d.num_iter, d.ridge, S);
        ch.scatter(S, dq);
      }
      chunk_backward(d, ch, S, ch.gather(x), states.data() + (n + 1) * DD, adj, dk, gk ? dgk : nullptr);
    }
    if (dstate_in) std::copy_n(adj.data(), DD, dstate_in + head.state());
  }
}

template void chebyshev_solve<float>(const ChebyshevDims&, const float*, const float*, const float*, const float*,
                                     float*, float*);
template void chebyshev_solve<double>(const ChebyshevDims&, const double*, const double*, const double*, const double*,
                                      double*, double*);
template void chebyshev_solve_backward<float>(const ChebyshevDims&, const float*, const float*, const float*,
                                              const float*, const float*, const float*, float*, float*, float*, float*);
template void chebyshev_solve_backward<double>(const ChebyshevDims&, const double*, const double*, const double*,
                                               const double*, const double*, const double*, double*, double*, double*,
                                               double*);

}  // namespace primer::ops::cpu
