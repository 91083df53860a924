// The chunked gated delta rule-2 on the CPU (the paper's §3.3 / App. A in the stable form). Per (batch, head) and
// chunk of c ≤ 64 tokens with the in-chunk cumulative log decay G_r = Σ_{s≤r} g_s ∈ R^K and S the state at the
// chunk's start, every decay factor a ratio exp(G_r − G_s) with r ≥ s (never γ⁻¹, which overflows for strong decay):
//   T_rs   = Σ_i b_ri k_ri k_si e^{G_ri − G_si}   (s < r)        the UT system's strictly lower part
//   Aqk_rs = Σ_i q_ri k_si e^{G_ri − G_si}         (s ≤ r)        scores, diagonal included (o reads S_t)
//   (I + T) Y = e^G⊙b⊙k,  (I + T) U = w⊙v                        forward substitution, both right-hand sides
//   R = U − Y S                                                   the delta residuals in decay-normalised form
//   o = scale · ((e^G⊙q) S + Aqk R)
//   S ← Diag(e^{G_c}) S + Σ_r (e^{G_c − G_r}⊙k_r) R_rᵀ
// The backward recomputes the chunk-start states with this forward, then the per-token states inside each chunk,
// and runs the reference's reverse step (gated_delta_rule2_step.h) in the working dtype.
#include "core/ops/cpu/gated_delta_rule2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/ops/cpu/gated_delta_rule2_step.h"
#include "core/ops/cpu/tile_math.h"

namespace primer::ops::cpu {
namespace {

constexpr int64_t kChunk = 64;

// One chunk of one (batch, head): its inputs gathered into dense tiles and the UT transform's results.
template <class T> struct Chunk {
  int64_t c = 0, K = 0, V = 0;
  std::vector<T> q, k, G;  // [c, K]; G the in-chunk cumulative log decay
  std::vector<T> Aqk;      // [c, c]
  std::vector<T> Y, U;     // [c, K], [c, V]

  T ratio(int64_t r, int64_t s, int64_t i) const { return std::exp(G[size_t(r * K + i)] - G[size_t(s * K + i)]); }

  Chunk(const GatedDelta2Dims& d, const T* q_in, const T* k_in, const T* v_in, const T* g_in, const T* b_in,
        const T* w_in, int64_t bi, int64_t h, int64_t t0)
      : c(std::min(kChunk, d.time - t0)), K(d.key_dim), V(d.value_dim) {
    q.resize(size_t(c * K));
    k.resize(size_t(c * K));
    G.resize(size_t(c * K));
    Y.resize(size_t(c * K));
    U.resize(size_t(c * V));
    std::vector<T> b(size_t(c * K));
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
    Aqk.assign(size_t(c * c), T(0));
    for (int64_t r = 0; r < c; ++r) {
      for (int64_t s = 0; s < r; ++s) {
        T t_rs = 0;
        for (int64_t i = 0; i < K; ++i)
          t_rs += b[size_t(r * K + i)] * k[size_t(r * K + i)] * k[size_t(s * K + i)] * ratio(r, s, i);
        for (int64_t i = 0; i < K; ++i) Y[size_t(r * K + i)] -= t_rs * Y[size_t(s * K + i)];
        for (int64_t j = 0; j < V; ++j) U[size_t(r * V + j)] -= t_rs * U[size_t(s * V + j)];
      }
      for (int64_t s = 0; s <= r; ++s) {
        T a = 0;
        for (int64_t i = 0; i < K; ++i) a += q[size_t(r * K + i)] * k[size_t(s * K + i)] * ratio(r, s, i);
        Aqk[size_t(r * c + s)] = a;
      }
    }
  }

  // o rows [c, V] (scaled) from the chunk-start state S, which advances to the chunk's end state.
  void run(T* S, T scale, T* out) const {
    std::vector<T> R = U;  // R = U − Y S
    matmul<T>(c, V, K, Y.data(), K, false, S, V, false, R.data(), V, T(-1), true);
    std::vector<T> qg(size_t(c * K)), kt(size_t(c * K));
    for (int64_t r = 0; r < c; ++r)
      for (int64_t i = 0; i < K; ++i) {
        qg[size_t(r * K + i)] = std::exp(G[size_t(r * K + i)]) * q[size_t(r * K + i)];
        kt[size_t(r * K + i)] = ratio(c - 1, r, i) * k[size_t(r * K + i)];
      }
    matmul<T>(c, V, K, qg.data(), K, false, S, V, false, out, V, scale, false);
    matmul<T>(c, V, c, Aqk.data(), c, false, R.data(), V, false, out, V, scale, true);
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
      // The state at each chunk's start, by the chunked forward.
      std::vector<T> starts(size_t(std::max<int64_t>(chunks, 1) * KV), T(0)), out;
      if (state_in) std::memcpy(starts.data(), state_in + d.state(bi, h), sizeof(T) * size_t(KV));
      for (int64_t n = 0; n + 1 < chunks; ++n) {
        const Chunk<T> ch(d, q, k, v, g, b, w, bi, h, n * kChunk);
        std::memcpy(&starts[size_t((n + 1) * KV)], &starts[size_t(n * KV)], sizeof(T) * size_t(KV));
        out.resize(size_t(ch.c * V));
        ch.run(&starts[size_t((n + 1) * KV)], scale, out.data());
      }
      // dS = ∂L/∂(the state after the token being processed), walking the tokens backwards chunk by chunk.
      std::vector<T> dS(size_t(KV), T(0)), states, work;
      if (dstate_out) std::memcpy(dS.data(), dstate_out + d.state(bi, h), sizeof(T) * size_t(KV));
      for (int64_t n = chunks - 1; n >= 0; --n) {
        const int64_t t0 = n * kChunk, c = std::min(kChunk, d.time - t0);
        auto token = [&](int64_t t) {
          const int64_t kr = d.key_row(bi, t, h), vr = d.value_row(bi, t, h);
          return Gdn2Token<T>{q + kr, k + kr, v + vr, g + kr, b + kr, w + vr};
        };
        // states[r] = the state before token t0 + r.
        states.resize(size_t(c * KV));
        std::memcpy(states.data(), &starts[size_t(n * KV)], sizeof(T) * size_t(KV));
        for (int64_t r = 1; r < c; ++r) {
          std::memcpy(&states[size_t(r * KV)], &states[size_t((r - 1) * KV)], sizeof(T) * size_t(KV));
          gdn2_step(&states[size_t(r * KV)], K, V, token(t0 + r - 1), scale, static_cast<T*>(nullptr));
        }
        for (int64_t r = c - 1; r >= 0; --r) {
          const int64_t kr = d.key_row(bi, t0 + r, h), vr = d.value_row(bi, t0 + r, h);
          gdn2_step_backward(dS.data(), &states[size_t(r * KV)], K, V, token(t0 + r), scale, dout + vr, dq + kr,
                             dk + kr, dv + vr, dg + kr, db + kr, dw + vr, work);
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
