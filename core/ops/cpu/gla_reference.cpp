// The ground truth of core/ops/gla.h: the recurrence token by token in f64, with a hand-written backward that runs
// it in reverse. Per (batch, head):
//   forward   S_t = a_t S_{t−1} + k_t v_tᵀ (a_t = exp g_t),  o_t = scale · S_tᵀ q_t
//   backward  with dS the gradient flowing into S_t (dstate_out for S_T), for t = T … 1:
//             dS += scale · q_t do_tᵀ;  dq_t = scale · S_t do_t;  dk_t = dS v_t;  dv_t = dSᵀ k_t;
//             dg_t = a_t <dS, S_{t−1}>;  dS ← a_t dS          and finally dstate_in = dS.
#include <cmath>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/ops/gla.h"
#include "core/ops/gla_check.h"

namespace primer::ops::reference {
namespace {

using Named = std::initializer_list<std::pair<const char*, const Tensor*>>;

void expect_f64(const char* op, const char* arg, const Tensor& t) {
  PRIMER_CHECK(!t.defined() || (t.is_cpu() && t.dtype() == DType::F64),
               "{}: argument '{}' is {}, the reference computes on f64 CPU tensors", op, arg, t.describe());
}

const double* ptr_or_null(const Tensor& t) { return t.defined() ? t.data<double>() : nullptr; }

// Views of one (batch, head) in the [B, T, H, D] / [B, T, H] / [B, H, K, V] layouts.
struct Layout {
  GlaDims d;
  int64_t row(int64_t b, int64_t t, int64_t h, int64_t width) const { return ((b * d.time + t) * d.heads + h) * width; }
  int64_t gate(int64_t b, int64_t t, int64_t h) const { return (b * d.time + t) * d.heads + h; }
  int64_t state(int64_t b, int64_t h) const { return (b * d.heads + h) * d.key_dim * d.value_dim; }
};

}  // namespace

Tensor gla(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& g_in, double scale,
           const Tensor& state_in, Tensor* state_out) {
  constexpr const char* op = "reference::gla";
  for (const auto& [name, t] : Named{{"q", &q_in}, {"k", &k_in}, {"v", &v_in}, {"g", &g_in}, {"state_in", &state_in}})
    expect_f64(op, name, *t);
  const GlaDims d = check_gla_inputs(op, q_in, k_in, v_in, g_in, scale, state_in);
  const Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous(), g = g_in.contiguous();
  const Tensor s0 = state_in.defined() ? state_in.contiguous() : Tensor();
  const Layout L{d};
  const int64_t K = d.key_dim, V = d.value_dim;
  Tensor o = Tensor::empty(v.shape(), DType::F64);
  Tensor st = Tensor::empty({d.batch, d.heads, K, V}, DType::F64);
  const double *pq = q.data<double>(), *pk = k.data<double>(), *pv = v.data<double>(), *pg = g.data<double>();
  const double* ps0 = ptr_or_null(s0);
  double *po = o.data<double>(), *pst = st.data<double>();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      double* S = pst + L.state(b, h);  // the running state lives in the output buffer
      for (int64_t i = 0; i < K * V; ++i) S[i] = ps0 ? ps0[L.state(b, h) + i] : 0.0;
      for (int64_t t = 0; t < d.time; ++t) {
        const double a = std::exp(pg[L.gate(b, t, h)]);
        const double *qt = pq + L.row(b, t, h, K), *kt = pk + L.row(b, t, h, K), *vt = pv + L.row(b, t, h, V);
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) S[i * V + j] = a * S[i * V + j] + kt[i] * vt[j];
        double* ot = po + L.row(b, t, h, V);
        for (int64_t j = 0; j < V; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < K; ++i) acc += S[i * V + j] * qt[i];
          ot[j] = scale * acc;
        }
      }
    }
  if (state_out) *state_out = st;
  return o;
}

GlaGrads gla_backward(const Tensor& dout_in, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                      const Tensor& g_in, double scale, const Tensor& state_in, const Tensor& dstate_out) {
  constexpr const char* op = "reference::gla_backward";
  for (const auto& [name, t] : Named{{"dout", &dout_in},
                                     {"q", &q_in},
                                     {"k", &k_in},
                                     {"v", &v_in},
                                     {"g", &g_in},
                                     {"state_in", &state_in},
                                     {"dstate_out", &dstate_out}})
    expect_f64(op, name, *t);
  const GlaDims d = check_gla_inputs(op, q_in, k_in, v_in, g_in, scale, state_in);
  check_gla_output_grads(op, d, v_in, dout_in, dstate_out);
  const Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous(), g = g_in.contiguous();
  const Tensor dout = dout_in.contiguous();
  const Tensor s0 = state_in.defined() ? state_in.contiguous() : Tensor();
  const Tensor dsT = dstate_out.defined() ? dstate_out.contiguous() : Tensor();
  const Layout L{d};
  const int64_t K = d.key_dim, V = d.value_dim, KV = K * V;

  GlaGrads grads;
  grads.dq = Tensor::empty(q.shape(), DType::F64);
  grads.dk = Tensor::empty(k.shape(), DType::F64);
  grads.dv = Tensor::empty(v.shape(), DType::F64);
  grads.dg = Tensor::empty(g.shape(), DType::F64);
  if (state_in.defined()) grads.dstate_in = Tensor::empty(state_in.shape(), DType::F64);
  const double *pq = q.data<double>(), *pk = k.data<double>(), *pv = v.data<double>(), *pg = g.data<double>();
  const double *pdo = dout.data<double>(), *ps0 = ptr_or_null(s0), *pdsT = ptr_or_null(dsT);
  double *dq = grads.dq.data<double>(), *dk = grads.dk.data<double>(), *dv = grads.dv.data<double>();
  double *dg = grads.dg.data<double>(), *dsi = grads.dstate_in.defined() ? grads.dstate_in.data<double>() : nullptr;

#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      // Every state S_0 … S_T of this (batch, head), recomputed forward.
      std::vector<double> S(size_t((d.time + 1) * KV));
      for (int64_t i = 0; i < KV; ++i) S[size_t(i)] = ps0 ? ps0[L.state(b, h) + i] : 0.0;
      for (int64_t t = 0; t < d.time; ++t) {
        const double a = std::exp(pg[L.gate(b, t, h)]);
        const double *kt = pk + L.row(b, t, h, K), *vt = pv + L.row(b, t, h, V);
        const double* prev = S.data() + t * KV;
        double* cur = S.data() + (t + 1) * KV;
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) cur[i * V + j] = a * prev[i * V + j] + kt[i] * vt[j];
      }
      std::vector<double> dS(static_cast<size_t>(KV));
      for (int64_t i = 0; i < KV; ++i) dS[size_t(i)] = pdsT ? pdsT[L.state(b, h) + i] : 0.0;
      for (int64_t t = d.time - 1; t >= 0; --t) {
        const double a = std::exp(pg[L.gate(b, t, h)]);
        const double *qt = pq + L.row(b, t, h, K), *kt = pk + L.row(b, t, h, K), *vt = pv + L.row(b, t, h, V);
        const double* dot = pdo + L.row(b, t, h, V);
        const double *cur = S.data() + (t + 1) * KV, *prev = S.data() + t * KV;
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) dS[size_t(i * V + j)] += scale * qt[i] * dot[j];
        double* dqt = dq + L.row(b, t, h, K);
        double* dkt = dk + L.row(b, t, h, K);
        for (int64_t i = 0; i < K; ++i) {
          double sq = 0, sk = 0;
          for (int64_t j = 0; j < V; ++j) {
            sq += cur[i * V + j] * dot[j];
            sk += dS[size_t(i * V + j)] * vt[j];
          }
          dqt[i] = scale * sq;
          dkt[i] = sk;
        }
        double* dvt = dv + L.row(b, t, h, V);
        for (int64_t j = 0; j < V; ++j) {
          double sv = 0;
          for (int64_t i = 0; i < K; ++i) sv += dS[size_t(i * V + j)] * kt[i];
          dvt[j] = sv;
        }
        double inner = 0;
        for (int64_t i = 0; i < KV; ++i) inner += dS[size_t(i)] * prev[i];
        dg[L.gate(b, t, h)] = a * inner;
        for (double& x : dS) x *= a;
      }
      if (dsi)
        for (int64_t i = 0; i < KV; ++i) dsi[L.state(b, h) + i] = dS[size_t(i)];
    }
  return grads;
}

}  // namespace primer::ops::reference
