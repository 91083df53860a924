// The ground truth of the Chebyshev solve, straight from the equations: per (batch, head) the state H_t is
// materialised token by token in f64 and the iteration runs on it; the backward is the hand-written implicit
// differentiation of the Gated KalmaNet paper (§4.2.2), with the decay and ridge terms written out here.
#include <cmath>
#include <vector>

#include "core/ops/chebyshev_solve_check.h"

namespace primer::ops::reference {
namespace {

using Matrix = std::vector<double>;  // D x D, row-major

struct HeadIndex {
  const ChebyshevDims& d;
  int64_t b, h;
  int64_t token(int64_t t) const { return ((b * d.time + t) * d.heads + h) * d.dim; }  // into [B, T, H, D]
  int64_t gate(int64_t t) const { return (b * d.time + t) * d.heads + h; }             // into [B, T, H]
  int64_t state() const { return (b * d.heads + h) * d.dim * d.dim; }                  // into [B, H, D, D]
};

double frobenius(const Matrix& H) {
  double s = 0;
  for (double v : H) s += v * v;
  return std::sqrt(s);
}

// x = CH(H + λI, rhs): `num_iter` updates of the Chebyshev semi-iteration on [λ, λ + F], λ = ridge·F, started from
// x_0 = step·rhs (x_{−1} = 0, ω_0 = 2). F = 0 (no key seen yet) gives x = 0: the system has no data.
void chebyshev(const Matrix& H, const ChebyshevDims& d, double F, const double* rhs, double* x) {
  const int64_t D = d.dim;
  std::vector<double> prev(static_cast<size_t>(D), 0.0), cur(static_cast<size_t>(D)), next(static_cast<size_t>(D));
  const double step = F > 0 ? 2.0 / ((1.0 + 2.0 * d.ridge) * F) : 0.0, lambda = d.ridge * F;
  const double rho = chebyshev_rho(d.ridge);
  for (int64_t i = 0; i < D; ++i) cur[size_t(i)] = step * rhs[i];
  double omega = 2.0;
  for (int64_t it = 0; it < d.num_iter; ++it) {
    omega = 4.0 / (4.0 - rho * rho * omega);
    for (int64_t i = 0; i < D; ++i) {
      double Ax = lambda * cur[size_t(i)];
      for (int64_t j = 0; j < D; ++j) Ax += H[size_t(i * D + j)] * cur[size_t(j)];
      next[size_t(i)] =
          cur[size_t(i)] - step * omega * (Ax - rhs[i]) + (omega - 1.0) * (cur[size_t(i)] - prev[size_t(i)]);
    }
    prev.swap(cur);
    cur.swap(next);
  }
  for (int64_t i = 0; i < D; ++i) x[i] = cur[size_t(i)];
}

// H ← exp(gk_t)·H + k_t k_tᵀ; returns exp(gk_t).
double advance(Matrix& H, const HeadIndex& ix, int64_t t, const double* k, const double* gk) {
  const int64_t D = ix.d.dim;
  const double decay = gk ? std::exp(gk[ix.gate(t)]) : 1.0;
  const double* kt = k + ix.token(t);
  for (int64_t i = 0; i < D; ++i)
    for (int64_t j = 0; j < D; ++j) H[size_t(i * D + j)] = decay * H[size_t(i * D + j)] + kt[i] * kt[j];
  return decay;
}

Matrix initial_state(const HeadIndex& ix, const double* state_in) {
  const int64_t DD = ix.d.dim * ix.d.dim;
  Matrix H(static_cast<size_t>(DD), 0.0);
  if (state_in)
    for (int64_t e = 0; e < DD; ++e) H[size_t(e)] = state_in[ix.state() + e];
  return H;
}

const double* ptr(const Tensor& t) { return t.defined() ? t.data<double>() : nullptr; }

}  // namespace

Tensor chebyshev_solve(const Tensor& q_, const Tensor& k_, const Tensor& gk_, const ChebyshevOptions& options,
                       const Tensor& state_in_, Tensor* state_out) {
  constexpr const char* op = "reference::chebyshev_solve";
  const ChebyshevDims d = chebyshev_check_inputs(op, q_, k_, gk_, options, state_in_);
  PRIMER_CHECK(q_.is_cpu() && q_.dtype() == DType::F64, "{}: argument 'q' is {}, expected an f64 CPU tensor", op,
               q_.describe());
  const Tensor q = q_.contiguous(), k = k_.contiguous(), gk = gk_.defined() ? gk_.contiguous() : Tensor(),
               state_in = state_in_.defined() ? state_in_.contiguous() : Tensor();
  Tensor x = Tensor::empty(q.shape(), DType::F64);
  Tensor st = Tensor::empty({d.batch, d.heads, d.dim, d.dim}, DType::F64);
  const int64_t D = d.dim;
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < d.heads_total(); ++bh) {
    const HeadIndex ix{d, bh / d.heads, bh % d.heads};
    Matrix H = initial_state(ix, ptr(state_in));
    for (int64_t t = 0; t < d.time; ++t) {
      advance(H, ix, t, k.data<double>(), ptr(gk));
      const double* qt = q.data<double>() + ix.token(t);
      double* xt = x.data<double>() + ix.token(t);
      if (d.num_iter == 0)
        for (int64_t i = 0; i < D; ++i) xt[i] = qt[i];
      else
        chebyshev(H, d, frobenius(H), qt, xt);
    }
    for (int64_t e = 0; e < D * D; ++e) st.data<double>()[ix.state() + e] = H[size_t(e)];
  }
  if (state_out) *state_out = st;
  return x;
}

// Per token, backwards: the adjoint solve s_t = CH(H_t + λ_t I, dx_t) is dq_t; the local state gradient
// dH_t = −s_t x_tᵀ − [bp_lambda] ridge·(x_tᵀs_t)/‖H_t‖_F · H_t (the second term is the path through λ_t) joins the
// running adjoint H̄_t = dH_t + exp(gk_{t+1}) H̄_{t+1} (H̄ after the last token: dstate_out); then
// dk_t = (H̄_t + H̄_tᵀ) k_t, dgk_t = exp(gk_t)·⟨H̄_t, H_{t−1}⟩ and finally dstate_in = exp(gk_1) H̄_1.
// With num_iter = 0, x = q does not depend on the state: dq = dx and only dstate_out reaches k, gk, state_in.
ChebyshevGrads chebyshev_solve_backward(const Tensor& dx_, const Tensor& x_, const Tensor& q_, const Tensor& k_,
                                        const Tensor& gk_, const ChebyshevOptions& options, const Tensor& state_in_,
                                        const Tensor& dstate_out_) {
  constexpr const char* op = "reference::chebyshev_solve_backward";
  const ChebyshevDims d = chebyshev_check_inputs(op, q_, k_, gk_, options, state_in_);
  PRIMER_CHECK(q_.is_cpu() && q_.dtype() == DType::F64, "{}: argument 'q' is {}, expected an f64 CPU tensor", op,
               q_.describe());
  chebyshev_check_backward(op, d, q_, dx_, x_, dstate_out_);
  const Tensor dx = dx_.contiguous(), x = x_.contiguous(), k = k_.contiguous(),
               gk = gk_.defined() ? gk_.contiguous() : Tensor(),
               state_in = state_in_.defined() ? state_in_.contiguous() : Tensor(),
               dstate_out = dstate_out_.defined() ? dstate_out_.contiguous() : Tensor();
  ChebyshevGrads g;
  g.dq = Tensor::empty(q_.shape(), DType::F64);
  g.dk = Tensor::empty(k_.shape(), DType::F64);
  if (gk.defined()) g.dgk = Tensor::empty(gk.shape(), DType::F64);
  if (state_in.defined()) g.dstate_in = Tensor::empty(state_in.shape(), DType::F64);
  const int64_t D = d.dim;
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < d.heads_total(); ++bh) {
    const HeadIndex ix{d, bh / d.heads, bh % d.heads};
    std::vector<Matrix> states{initial_state(ix, ptr(state_in))};  // H_0 .. H_T
    std::vector<double> decay(static_cast<size_t>(d.time)), norm(static_cast<size_t>(d.time));
    for (int64_t t = 0; t < d.time; ++t) {
      Matrix H = states.back();
      decay[size_t(t)] = advance(H, ix, t, k.data<double>(), ptr(gk));
      norm[size_t(t)] = frobenius(H);
      states.push_back(std::move(H));
    }
    Matrix adj(static_cast<size_t>(D * D), 0.0);  // exp(gk_{t+1}) H̄_{t+1}
    if (dstate_out.defined())
      for (int64_t e = 0; e < D * D; ++e) adj[size_t(e)] = dstate_out.data<double>()[ix.state() + e];
    std::vector<double> s(static_cast<size_t>(D));
    for (int64_t t = d.time - 1; t >= 0; --t) {
      const Matrix& H = states[size_t(t + 1)];
      const double* dxt = dx.data<double>() + ix.token(t);
      const double* xt = x.data<double>() + ix.token(t);
      double* dqt = g.dq.data<double>() + ix.token(t);
      if (d.num_iter == 0) {
        for (int64_t i = 0; i < D; ++i) dqt[i] = dxt[i];
      } else {
        const double F = norm[size_t(t)];
        chebyshev(H, d, F, dxt, s.data());
        double xs = 0;
        for (int64_t i = 0; i < D; ++i) {
          dqt[i] = s[size_t(i)];
          xs += xt[i] * s[size_t(i)];
        }
        const double half_w = d.bp_lambda && F > 0 ? d.ridge * xs / F : 0.0;
        for (int64_t i = 0; i < D; ++i)
          for (int64_t j = 0; j < D; ++j)
            adj[size_t(i * D + j)] -= s[size_t(i)] * xt[j] + half_w * H[size_t(i * D + j)];
      }
      const double* kt = k.data<double>() + ix.token(t);
      double* dkt = g.dk.data<double>() + ix.token(t);
      for (int64_t i = 0; i < D; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < D; ++j) acc += (adj[size_t(i * D + j)] + adj[size_t(j * D + i)]) * kt[j];
        dkt[i] = acc;
      }
      if (gk.defined()) {
        const Matrix& prev = states[size_t(t)];
        double inner = 0;
        for (int64_t e = 0; e < D * D; ++e) inner += adj[size_t(e)] * prev[size_t(e)];
        g.dgk.data<double>()[ix.gate(t)] = decay[size_t(t)] * inner;
      }
      for (double& v : adj) v *= decay[size_t(t)];
    }
    if (state_in.defined())
      for (int64_t e = 0; e < D * D; ++e) g.dstate_in.data<double>()[ix.state() + e] = adj[size_t(e)];
  }
  return g;
}

}  // namespace primer::ops::reference
