#include "core/ops/cpu/kalman_scan.h"

#include <algorithm>
#include <vector>

namespace primer::ops::cpu {
namespace {

constexpr int64_t kChunk = 64;

struct At {
  const KalmanDims& d;
  int64_t qk(int64_t b, int64_t t, int64_t h) const { return ((b * d.time + t) * d.heads + h) * d.slots; }
  int64_t vd(int64_t b, int64_t t, int64_t h) const { return ((b * d.time + t) * d.heads + h) * d.channels; }
  int64_t dyn(int64_t h, int64_t n) const { return (h * d.slots + n) * d.channels; }
  int64_t state(int64_t b, int64_t h, int64_t n) const { return ((b * d.heads + h) * d.slots + n) * d.channels; }
};

// λ_t, η_t for t = 0..T of filter (b, h, n, c). Within a chunk the precision is the chunk's incoming λ mapped by the
// prefix product M_t ⋯ M_{c+1} of M = [[1 + p̄φ, ā²φ], [p̄, ā²]], renormalised to trace 1 after each product (the map
// is projective: scaling M changes nothing, and the entries stay positive and bounded).
template <class T> void states(const KalmanDims& d, const T* k, const T* v, const T* lv, T a, T p, T lam0, T eta0,
                               int64_t b, int64_t h, int64_t n, int64_t c, std::vector<T>& lam, std::vector<T>& eta) {
  const At at{d};
  lam.resize(size_t(d.time + 1));
  eta.resize(size_t(d.time + 1));
  lam[0] = lam0;
  eta[0] = eta0;
  const T a2 = a * a;
  for (int64_t start = 0; start < d.time; start += kChunk) {
    const T lam_in = lam[size_t(start)];
    T m00 = 1, m01 = 0, m10 = 0, m11 = 1;
    for (int64_t t = start; t < std::min(d.time, start + kChunk); ++t) {
      const T kn = k[at.qk(b, t, h) + n], l = lv[at.vd(b, t, h) + c], phi = kn * kn * l;
      // [[1 + p̄φ, ā²φ], [p̄, ā²]] · P
      const T n00 = (1 + p * phi) * m00 + a2 * phi * m10, n01 = (1 + p * phi) * m01 + a2 * phi * m11;
      const T n10 = p * m00 + a2 * m10, n11 = p * m01 + a2 * m11;
      const T inv_trace = 1 / (n00 + n11);
      m00 = n00 * inv_trace, m01 = n01 * inv_trace, m10 = n10 * inv_trace, m11 = n11 * inv_trace;
      lam[size_t(t + 1)] = (m00 * lam_in + m01) / (m10 * lam_in + m11);
      const T f = a / (a2 + p * lam[size_t(t)]);
      eta[size_t(t + 1)] = f * eta[size_t(t)] + kn * l * v[at.vd(b, t, h) + c];
    }
  }
}

}  // namespace

template <class T> void kalman_scan(const KalmanDims& d, const T* q, const T* k, const T* v, const T* lv, const T* a,
                                    const T* p, const T* lam0, const T* eta0, T* y, T* y_var, T* lam_out, T* eta_out) {
  const At at{d};
  std::fill(y, y + d.batch * d.time * d.heads * d.channels, T(0));
  if (y_var) std::fill(y_var, y_var + d.batch * d.time * d.heads * d.channels, T(0));
    // One (b, h) per iteration: the readouts sum over n, so the filters of one (b, h) stay in one thread.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      std::vector<T> lam, eta;
      for (int64_t n = 0; n < d.slots; ++n)
        for (int64_t c = 0; c < d.channels; ++c) {
          const int64_t st = at.state(b, h, n) + c, dyn = at.dyn(h, n) + c;
          states(d, k, v, lv, a[dyn], p[dyn], lam0[st], eta0[st], b, h, n, c, lam, eta);
          for (int64_t t = 0; t < d.time; ++t) {
            const T qn = q[at.qk(b, t, h) + n], l = lam[size_t(t + 1)];
            y[at.vd(b, t, h) + c] += qn * eta[size_t(t + 1)] / l;
            if (y_var) y_var[at.vd(b, t, h) + c] += qn * qn / l;
          }
          lam_out[st] = lam[size_t(d.time)];
          eta_out[st] = eta[size_t(d.time)];
        }
    }
}

template <class T> void kalman_scan_backward(const KalmanDims& d, const T* dy, const T* dy_var, const T* dlam_out,
                                             const T* deta_out, const T* q, const T* k, const T* v, const T* lv,
                                             const T* a, const T* p, const T* lam0, const T* eta0, T* dq, T* dk, T* dv,
                                             T* dlv, T* da, T* dp, T* dlam0, T* deta0) {
  const At at{d};
  std::fill(dq, dq + d.batch * d.time * d.heads * d.slots, T(0));
  std::fill(dk, dk + d.batch * d.time * d.heads * d.slots, T(0));
  std::fill(dv, dv + d.batch * d.time * d.heads * d.channels, T(0));
  std::fill(dlv, dlv + d.batch * d.time * d.heads * d.channels, T(0));
  // ā and p̄ gather over the batch: one thread per head, the batch inside, sums in f64.
#pragma omp parallel for schedule(static)
  for (int64_t h = 0; h < d.heads; ++h) {
    std::vector<T> lam, eta;
    for (int64_t n = 0; n < d.slots; ++n)
      for (int64_t c = 0; c < d.channels; ++c) {
        const int64_t dyn = at.dyn(h, n) + c;
        const T A = a[dyn], P = p[dyn];
        double ga = 0, gp = 0;
        for (int64_t b = 0; b < d.batch; ++b) {
          const int64_t st = at.state(b, h, n) + c;
          states(d, k, v, lv, A, P, lam0[st], eta0[st], b, h, n, c, lam, eta);
          T carry_eta = deta_out ? deta_out[st] : T(0), carry_lam = dlam_out ? dlam_out[st] : T(0);
          for (int64_t t = d.time - 1; t >= 0; --t) {
            const int64_t iq = at.qk(b, t, h) + n, iv = at.vd(b, t, h) + c;
            const T l = lam[size_t(t + 1)], l_prev = lam[size_t(t)], mu = eta[size_t(t + 1)] / l;
            const T qn = q[iq], kn = k[iq], lvc = lv[iv], vc = v[iv];
            const T gy = dy ? dy[iv] : T(0), gvar = dy_var ? dy_var[iv] : T(0);
            dq[iq] += gy * mu + 2 * qn * gvar / l;
            const T g_mu = qn * gy;
            const T G_eta = g_mu / l + carry_eta;
            const T G_lam = -g_mu * mu / l - qn * qn * gvar / (l * l) + carry_lam;
            const T rho = 1 / (A * A + P * l_prev), f = A * rho, g_f = G_eta * eta[size_t(t)];
            dk[iq] += 2 * kn * lvc * G_lam + lvc * vc * G_eta;
            dlv[iv] += kn * kn * G_lam + kn * vc * G_eta;
            dv[iv] += kn * lvc * G_eta;
            gp += double(G_lam * (-l_prev * l_prev * rho * rho) + g_f * (-A * l_prev * rho * rho));
            ga += double(G_lam * (-2 * A * l_prev * rho * rho) + g_f * (rho - 2 * A * A * rho * rho));
            carry_eta = f * G_eta;
            carry_lam = A * A * rho * rho * G_lam - A * P * rho * rho * g_f;
          }
          if (dlam0) dlam0[st] = carry_lam;
          if (deta0) deta0[st] = carry_eta;
        }
        da[dyn] = T(ga);
        dp[dyn] = T(gp);
      }
  }
}

#define PRIMER_KALMAN_SCAN(T)                                                                                          \
  template void kalman_scan<T>(const KalmanDims&, const T*, const T*, const T*, const T*, const T*, const T*,          \
                               const T*, const T*, T*, T*, T*, T*);                                                    \
  template void kalman_scan_backward<T>(const KalmanDims&, const T*, const T*, const T*, const T*, const T*, const T*, \
                                        const T*, const T*, const T*, const T*, const T*, const T*, T*, T*, T*, T*,    \
                                        T*, T*, T*, T*);
PRIMER_KALMAN_SCAN(float)
PRIMER_KALMAN_SCAN(double)
#undef PRIMER_KALMAN_SCAN

}  // namespace primer::ops::cpu
