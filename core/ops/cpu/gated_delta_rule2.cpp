// The chunked gated delta rule-2 on the CPU (the paper's §3.3 / App. A in the stable form). Per (batch, head) and
// chunk of c ≤ 64 tokens with the in-chunk cumulative log decay G_r = Σ_{s≤r} g_s ∈ R^K and S the state at the
// chunk's start, every decay factor a ratio exp(G_r − G_s) with r ≥ s (never γ⁻¹, which overflows for strong decay):
//   T_rs   = Σ_i b_ri k_ri k_si e^{G_ri − G_si}   (s < r)        the UT system's strictly lower part
//   Aqk_rs = Σ_i q_ri k_si e^{G_ri − G_si}         (s ≤ r)        scores, diagonal included (o reads S_t)
//   (I + T) Y = e^G⊙b⊙k,  (I + T) U = w⊙v                        forward substitution, both right-hand sides
//   R = U − Y S                                                   the delta residuals in decay-normalised form
//   o = scale · ((e^G⊙q) S + Aqk R)
//   S ← Diag(e^{G_c}) S + Σ_r (e^{G_c − G_r}⊙k_r) R_rᵀ
// The backward (the paper's App. B per-chunk VJP, in the same ratio form) recomputes every chunk's T, A_qk, Y, U and
// start state with this forward, then walks the chunks in reverse with dS = ∂L/∂(the chunk's end state):
//   output and state VJP:  dR = A_qkᵀ dO + K̃ dS (K̃_r = e^{G_c − G_r}⊙k_r),  dA_qk = tril(dO Rᵀ),
//                          d(e^G⊙q) = dO Sᵀ,  dK̃ = R dSᵀ,  ∂/∂G_c += e^{G_c}⊙rowsum(dS⊙S)     (dO = scale·dout)
//   through R = U − Y S:   dU = dR,  dY = −dR Sᵀ
//   UT (WY) VJP:           dZ = (I + T)⁻ᵀ dU,  dE = (I + T)⁻ᵀ dY  (back substitution),
//                          dT = −tril(dZ Uᵀ + dE Yᵀ, −1)  (= −tril(Aᵀ dA Aᵀ, −1), dA = dU Zᵀ + dY Eᵀ, A = (I + T)⁻¹)
//   the start state:       dS ← Diag(e^{G_c}) dS + (e^G⊙q)ᵀ dO − Yᵀ dR
//   intra-chunk pairs:     T_rs and A_qk,rs differentiated channel by channel with their ratio ρ = e^{G_r − G_s}
//                          (each term x adds x to ∂/∂G_r and −x to ∂/∂G_s), ρ built as a product of per-token
//                          decays e^{g} ≤ 1 walking s down from r (no exponential per pair; the forward's T and
//                          A_qk take theirs the same way)
//   and dg the reverse cumulative sum of ∂/∂G over the chunk, per channel.
#include "core/ops/cpu/gated_delta_rule2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/ops/cpu/tile_math.h"

namespace primer::ops::cpu {
namespace {

constexpr int64_t kChunk = 64;

// One chunk of one (batch, head): its inputs gathered into dense tiles and the UT transform's results.
template <class T> struct Chunk {
  int64_t c = 0, K = 0, V = 0;
  std::vector<T> q, k, b, G;  // [c, K]; G the in-chunk cumulative log decay
  std::vector<T> Tl, Aqk;     // [c, c]: the UT system's strictly lower part, the scores
  std::vector<T> Y, U;        // [c, K], [c, V]

  T ratio(int64_t r, int64_t s, int64_t i) const { return std::exp(G[size_t(r * K + i)] - G[size_t(s * K + i)]); }

  Chunk(const GatedDelta2Dims& d, const T* q_in, const T* k_in, const T* v_in, const T* g_in, const T* b_in,
        const T* w_in, int64_t bi, int64_t h, int64_t t0)
      : c(std::min(kChunk, d.time - t0)), K(d.key_dim), V(d.value_dim) {
    q.resize(size_t(c * K));
    k.resize(size_t(c * K));
    G.resize(size_t(c * K));
    Y.resize(size_t(c * K));
    U.resize(size_t(c * V));
    b.resize(size_t(c * K));
    for (int64_t r = 0; r < c; ++r) {
      const int64_t kr = d.key_row(bi, t0 + r, h), vr = d.value_row(bi, t0 + r, h);
      std::memcpy(&q[size_t(r * K)], q_in + kr, sizeof(T) * size_t(K));
      std::memcpy(&k[size_t(r * K)], k_in + kr, sizeof(T) * size_t(K));
      std::memcpy(&b[size_t(r * K)], b_in + kr, sizeof(T) * size_t(K));
      for (int64_t i = 0; i < K; ++i) G[size_t(r * K + i)] = (r ? G[size_t((r - 1) * K + i)] : T(0)) + g_in[kr + i];
      for (int64_t j = 0; j < V; ++j) U[size_t(r * V + j)] = w_in[vr + j] * v_in[vr + j];  // Z = w⊙v
      for (int64_t i = 0; i < K; ++i)
        Y[size_t(r * K + i)] = std::exp(G[size_t(r * K + i)]) * b[size_t(r * K + i)] * k[size_t(r * K + i)];
    }
    // Y ← (I + T)⁻¹ Ē and U ← (I + T)⁻¹ Z by forward substitution: row r minus Σ_{s<r} T_rs (solved row s).
    Tl.assign(size_t(c * c), T(0));
    Aqk.assign(size_t(c * c), T(0));
    // The pair's decay ratios e^{G_r − G_s}, shared by T_rs and Aqk_rs, as products of the per-token decays e^{g} ≤ 1
    // walking s down from r (one multiply per pair and channel instead of an exponential; the substitution's sums
    // over s are order-free).
    std::vector<T> alpha(size_t(c * K)), rho(static_cast<size_t>(K));
    for (int64_t r = 0; r < c; ++r)
      for (int64_t i = 0; i < K; ++i) alpha[size_t(r * K + i)] = std::exp(g_in[d.key_row(bi, t0 + r, h) + i]);
    for (int64_t r = 0; r < c; ++r) {
      const T *qr = &q[size_t(r * K)], *kr = &k[size_t(r * K)], *br = &b[size_t(r * K)];
      std::fill(rho.begin(), rho.end(), T(1));
      for (int64_t s = r - 1; s >= 0; --s) {
        const T* ks = &k[size_t(s * K)];
        const T* decay = &alpha[size_t((s + 1) * K)];
        for (int64_t i = 0; i < K; ++i) rho[size_t(i)] *= decay[i];
        T t_rs = 0, a = 0;
        for (int64_t i = 0; i < K; ++i) t_rs += br[i] * kr[i] * ks[i] * rho[size_t(i)];
        for (int64_t i = 0; i < K; ++i) a += qr[i] * ks[i] * rho[size_t(i)];
        Tl[size_t(r * c + s)] = t_rs;
        Aqk[size_t(r * c + s)] = a;
        for (int64_t i = 0; i < K; ++i) Y[size_t(r * K + i)] -= t_rs * Y[size_t(s * K + i)];
        for (int64_t j = 0; j < V; ++j) U[size_t(r * V + j)] -= t_rs * U[size_t(s * V + j)];
      }
      Aqk[size_t(r * c + r)] = dot(qr, kr, K);  // ratio 1 on the diagonal
    }
  }

  // o rows [c, V] (scaled; skipped if out is null) from the chunk-start state S, which advances to the chunk's end
  // state.
  void run(T* S, T scale, T* out) const {
    std::vector<T> R = U;  // R = U − Y S
    matmul<T>(c, V, K, Y.data(), K, false, S, V, false, R.data(), V, T(-1), true);
    std::vector<T> qg(size_t(c * K)), kt(size_t(c * K));
    for (int64_t r = 0; r < c; ++r)
      for (int64_t i = 0; i < K; ++i) {
        qg[size_t(r * K + i)] = std::exp(G[size_t(r * K + i)]) * q[size_t(r * K + i)];
        kt[size_t(r * K + i)] = ratio(c - 1, r, i) * k[size_t(r * K + i)];
      }
    if (out) {
      matmul<T>(c, V, K, qg.data(), K, false, S, V, false, out, V, scale, false);
      matmul<T>(c, V, c, Aqk.data(), c, false, R.data(), V, false, out, V, scale, true);
    }
    for (int64_t i = 0; i < K; ++i) {
      const T a = std::exp(G[size_t((c - 1) * K + i)]);
      for (int64_t j = 0; j < V; ++j) S[i * V + j] *= a;
    }
    matmul<T>(K, V, c, kt.data(), K, true, R.data(), V, false, S, V, T(1), true);
  }
};

}  // namespace

template <class T> void gated_delta_rule2_chunked(const GatedDelta2Dims& d, const T* q, const T* k, const T* v,
                                                  const T* g, const T* b, const T* w, const T* state_in, T* o,
                                                  T* state_out) {
  const int64_t K = d.key_dim, V = d.value_dim;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bi = 0; bi < d.batch; ++bi)
    for (int64_t h = 0; h < d.heads; ++h) {
      std::vector<T> S(size_t(K * V), T(0)), out;
      if (state_in) std::memcpy(S.data(), state_in + d.state(bi, h), sizeof(T) * size_t(K * V));
      for (int64_t t0 = 0; t0 < d.time; t0 += kChunk) {
        const Chunk<T> ch(d, q, k, v, g, b, w, bi, h, t0);
        out.resize(size_t(ch.c * V));
        ch.run(S.data(), T(d.scale), out.data());
        for (int64_t r = 0; r < ch.c; ++r)
          std::memcpy(o + d.value_row(bi, t0 + r, h), &out[size_t(r * V)], sizeof(T) * size_t(V));
      }
      if (state_out) std::memcpy(state_out + d.state(bi, h), S.data(), sizeof(T) * size_t(K * V));
    }
}

template <class T> void gated_delta_rule2_chunked_backward(const GatedDelta2Dims& d, const T* dout, const T* q,
                                                           const T* k, const T* v, const T* g, const T* b, const T* w,
                                                           const T* state_in, const T* dstate_out, T* dq, T* dk, T* dv,
                                                           T* dg, T* db, T* dw, T* dstate_in) {
  const int64_t K = d.key_dim, V = d.value_dim, KV = K * V;
  const int64_t chunks = (d.time + kChunk - 1) / kChunk;
  const T scale = T(d.scale);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bi = 0; bi < d.batch; ++bi)
    for (int64_t h = 0; h < d.heads; ++h) {
      // Every chunk's UT quantities and the state at each chunk's start, by the chunked forward (the chunks are kept:
      // 5K + V + 128 values per token and head: a few times the inputs).
      std::vector<T> starts(size_t(std::max<int64_t>(chunks, 1) * KV), T(0));
      if (state_in) std::memcpy(starts.data(), state_in + d.state(bi, h), sizeof(T) * size_t(KV));
      std::vector<Chunk<T>> all;
      all.reserve(size_t(chunks));
      for (int64_t n = 0; n < chunks; ++n) {
        const Chunk<T>& ch = all.emplace_back(d, q, k, v, g, b, w, bi, h, n * kChunk);
        if (n + 1 == chunks) break;
        std::memcpy(&starts[size_t((n + 1) * KV)], &starts[size_t(n * KV)], sizeof(T) * size_t(KV));
        ch.run(&starts[size_t((n + 1) * KV)], scale, nullptr);
      }
      // dS = ∂L/∂(the state at the end of chunk n), walking n = last..0; it becomes ∂L/∂(the chunk's start state).
      std::vector<T> dS(size_t(KV), T(0)), rho(static_cast<size_t>(K));
      if (dstate_out) std::memcpy(dS.data(), dstate_out + d.state(bi, h), sizeof(T) * size_t(KV));
      for (int64_t n = chunks - 1; n >= 0; --n) {
        const int64_t t0 = n * kChunk;
        const Chunk<T>& ch = all[size_t(n)];
        const int64_t c = ch.c, last = c - 1;
        const T* S = &starts[size_t(n * KV)];
        auto at = [&](const std::vector<T>& x, int64_t r, int64_t i, int64_t width) {
          return x[size_t(r * width + i)];
        };

        // R = U − Y S, and dO = scale · dout (o = (e^G⊙q) S dO-weighted + A_qk R, both scaled).
        std::vector<T> R = ch.U, dO(size_t(c * V));
        matmul<T>(c, V, K, ch.Y.data(), K, false, S, V, false, R.data(), V, T(-1), true);
        for (int64_t r = 0; r < c; ++r)
          for (int64_t j = 0; j < V; ++j) dO[size_t(r * V + j)] = scale * dout[d.value_row(bi, t0 + r, h) + j];

        // Output VJP and the state path. With K̃_r = e^{G_c − G_r}⊙k_r (S_end = Diag(e^{G_c}) S + K̃ᵀ R):
        //   dR = A_qkᵀ dO + K̃ dS,  d(e^G⊙q) = dO Sᵀ,  dK̃ = R dSᵀ,  ∂L/∂G_c += e^{G_c}⊙rowsum(dS⊙S).
        std::vector<T> kt(size_t(c * K)), dR(size_t(c * V));
        for (int64_t r = 0; r < c; ++r)
          for (int64_t i = 0; i < K; ++i) kt[size_t(r * K + i)] = ch.ratio(last, r, i) * at(ch.k, r, i, K);
        matmul<T>(c, V, K, kt.data(), K, false, dS.data(), V, false, dR.data(), V, T(1), false);
        matmul<T>(c, V, c, ch.Aqk.data(), c, true, dO.data(), V, false, dR.data(), V, T(1), true);
        std::vector<T> dq_c(size_t(c * K)), dk_c(size_t(c * K)), db_c(size_t(c * K), T(0)), dG(size_t(c * K), T(0));
        std::vector<T> dkt(size_t(c * K));
        matmul<T>(c, K, V, dO.data(), V, false, S, V, true, dq_c.data(), K, T(1), false);
        matmul<T>(c, K, V, R.data(), V, false, dS.data(), V, true, dkt.data(), K, T(1), false);
        for (int64_t r = 0; r < c; ++r)
          for (int64_t i = 0; i < K; ++i) {
            const size_t e = size_t(r * K + i);
            dq_c[e] *= std::exp(ch.G[e]);
            dG[e] += dq_c[e] * ch.q[e];
            dk_c[e] = ch.ratio(last, r, i) * dkt[e];
            const T x = dk_c[e] * ch.k[e];  // ∂L/∂(G_c − G_r)
            dG[size_t(last * K + i)] += x;
            dG[e] -= x;
          }
        for (int64_t i = 0; i < K; ++i)
          dG[size_t(last * K + i)] += std::exp(at(ch.G, last, i, K)) * dot(&dS[size_t(i * V)], S + i * V, V);

        // R = U − Y S: dU = dR, dY = −dR Sᵀ; through the UT solves (I + T)U = Z, (I + T)Y = E by back substitution
        // with (I + T)ᵀ: dZ = (I + T)⁻ᵀ dU, dE = (I + T)⁻ᵀ dY, and dT = −tril(dZ Uᵀ + dE Yᵀ, −1) (the paper's
        // dT = −tril(Aᵀ dA Aᵀ, −1) with dA = dU Zᵀ + dY Eᵀ, A = (I + T)⁻¹).
        std::vector<T> dZ = dR, dE(size_t(c * K));
        matmul<T>(c, K, V, dR.data(), V, false, S, V, true, dE.data(), K, T(-1), false);
        for (int64_t r = c - 1; r >= 0; --r)
          for (int64_t s = r + 1; s < c; ++s) {
            const T t_sr = at(ch.Tl, s, r, c);
            for (int64_t j = 0; j < V; ++j) dZ[size_t(r * V + j)] -= t_sr * dZ[size_t(s * V + j)];
            for (int64_t i = 0; i < K; ++i) dE[size_t(r * K + i)] -= t_sr * dE[size_t(s * K + i)];
          }

        // ∂L/∂(the chunk's start state), once dS (the end state's) is no longer needed:
        //   Diag(e^{G_c}) dS + (e^G⊙q)ᵀ dO − Yᵀ dR.
        std::vector<T> qg(size_t(c * K));
        for (int64_t e = 0; e < c * K; ++e) qg[size_t(e)] = std::exp(ch.G[size_t(e)]) * ch.q[size_t(e)];
        for (int64_t i = 0; i < K; ++i) {
          const T a = std::exp(at(ch.G, last, i, K));
          for (int64_t j = 0; j < V; ++j) dS[size_t(i * V + j)] *= a;
        }
        matmul<T>(K, V, c, qg.data(), K, true, dO.data(), V, false, dS.data(), V, T(1), true);
        matmul<T>(K, V, c, ch.Y.data(), K, true, dR.data(), V, false, dS.data(), V, T(-1), true);

        // E = e^G⊙b⊙k and Z = w⊙v.
        for (int64_t r = 0; r < c; ++r) {
          for (int64_t i = 0; i < K; ++i) {
            const size_t e = size_t(r * K + i);
            const T de = dE[e] * std::exp(ch.G[e]);
            db_c[e] += de * ch.k[e];
            dk_c[e] += de * ch.b[e];
            dG[e] += de * ch.b[e] * ch.k[e];
          }
          const int64_t vr = d.value_row(bi, t0 + r, h);
          for (int64_t j = 0; j < V; ++j) {
            dw[vr + j] = dZ[size_t(r * V + j)] * v[vr + j];
            dv[vr + j] = dZ[size_t(r * V + j)] * w[vr + j];
          }
        }

        // The pairwise terms, one decay ratio ρ_i = e^{G_ri − G_si} per pair s ≤ r and channel:
        //   A_qk,rs = Σ_i q_ri k_si ρ_i with dA_qk,rs = dO_r·R_s;  T_rs = Σ_i b_ri k_ri k_si ρ_i (s < r) with
        //   dT_rs = −(dZ_r·U_s + dE_r·Y_s); each term x_i of a pair adds ∂L/∂G_ri += x_i, ∂L/∂G_si −= x_i.
        std::vector<T> alpha(size_t(c * K));  // e^{g_t}: ρ(r, s) = ρ(r, s + 1) ⊙ e^{g_{s+1}}, every factor ≤ 1
        for (int64_t r = 0; r < c; ++r) {
          const int64_t kr = d.key_row(bi, t0 + r, h);
          for (int64_t i = 0; i < K; ++i) alpha[size_t(r * K + i)] = std::exp(g[kr + i]);
        }
        for (int64_t r = 0; r < c; ++r)
          for (int64_t s = r; s >= 0; --s) {
            const T da = dot(&dO[size_t(r * V)], &R[size_t(s * V)], V);
            const T dt = s < r ? -(dot(&dZ[size_t(r * V)], &ch.U[size_t(s * V)], V) +
                                   dot(&dE[size_t(r * K)], &ch.Y[size_t(s * K)], K))
                               : T(0);
            const T *qr = &ch.q[size_t(r * K)], *kr = &ch.k[size_t(r * K)], *br = &ch.b[size_t(r * K)];
            const T* ks = &ch.k[size_t(s * K)];
            T *dqr = &dq_c[size_t(r * K)], *dkr = &dk_c[size_t(r * K)], *dbr = &db_c[size_t(r * K)];
            T *dks = &dk_c[size_t(s * K)], *dGr = &dG[size_t(r * K)], *dGs = &dG[size_t(s * K)];
            if (s == r)
              std::fill(rho.begin(), rho.end(), T(1));
            else
              for (int64_t i = 0; i < K; ++i) rho[size_t(i)] *= alpha[size_t((s + 1) * K + i)];
            for (int64_t i = 0; i < K; ++i) {
              const T p = rho[size_t(i)];
              const T aq = da * p, tb = dt * br[i] * kr[i] * p;  // ∂/∂k_si of the two terms
              dqr[i] += aq * ks[i];
              dks[i] += aq * qr[i] + tb;
              const T tk = dt * ks[i] * p;  // ∂T_rs/∂(b_ri k_ri) · dT
              dbr[i] += tk * kr[i];
              dkr[i] += tk * br[i];
              if (s < r) {
                const T x = aq * qr[i] * ks[i] + tb * ks[i];
                dGr[i] += x;
                dGs[i] -= x;
              }
            }
          }

        // g_t enters every G_r with r ≥ t in its chunk: a reverse cumulative sum per channel.
        std::vector<T> suffix(size_t(K), T(0));
        for (int64_t r = c - 1; r >= 0; --r) {
          const int64_t kr = d.key_row(bi, t0 + r, h);
          for (int64_t i = 0; i < K; ++i) {
            suffix[size_t(i)] += dG[size_t(r * K + i)];
            dg[kr + i] = suffix[size_t(i)];
          }
          std::memcpy(dq + kr, &dq_c[size_t(r * K)], sizeof(T) * size_t(K));
          std::memcpy(dk + kr, &dk_c[size_t(r * K)], sizeof(T) * size_t(K));
          std::memcpy(db + kr, &db_c[size_t(r * K)], sizeof(T) * size_t(K));
        }
      }
      if (dstate_in) std::memcpy(dstate_in + d.state(bi, h), dS.data(), sizeof(T) * size_t(KV));
    }
}

#define PRIMER_GATED_DELTA2_INSTANTIATE(T)                                                                             \
  template void gated_delta_rule2_chunked<T>(const GatedDelta2Dims&, const T*, const T*, const T*, const T*, const T*, \
                                             const T*, const T*, T*, T*);                                              \
  template void gated_delta_rule2_chunked_backward<T>(const GatedDelta2Dims&, const T*, const T*, const T*, const T*,  \
                                                      const T*, const T*, const T*, const T*, const T*, T*, T*, T*,    \
                                                      T*, T*, T*, T*);
PRIMER_GATED_DELTA2_INSTANTIATE(float)
PRIMER_GATED_DELTA2_INSTANTIATE(double)
#undef PRIMER_GATED_DELTA2_INSTANTIATE

}  // namespace primer::ops::cpu
