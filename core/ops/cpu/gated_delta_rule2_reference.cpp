// The gated delta rule-2 token by token in f64 (core/ops/cpu/gated_delta_rule2_step.h), and its backward: every
// state S_t kept (the reference runs on small sizes), then the reverse steps from the last token.
#include <cstring>
#include <vector>

#include "core/ops/cpu/gated_delta_rule2.h"
#include "core/ops/cpu/gated_delta_rule2_step.h"

namespace primer::ops::cpu {
namespace {

Gdn2Token<double> token(const GatedDelta2Dims& d, const double* q, const double* k, const double* v, const double* g,
                        const double* b, const double* w, int64_t bi, int64_t t, int64_t h) {
  const int64_t kr = d.key_row(bi, t, h), vr = d.value_row(bi, t, h);
  return {q + kr, k + kr, v + vr, g + kr, b + kr, w + vr};
}

}  // namespace

void gated_delta_rule2_reference(const GatedDelta2Dims& d, const double* q, const double* k, const double* v,
                                 const double* g, const double* b, const double* w, const double* state_in, double* o,
                                 double* state_out) {
  const int64_t K = d.key_dim, V = d.value_dim;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bi = 0; bi < d.batch; ++bi)
    for (int64_t h = 0; h < d.heads; ++h) {
      std::vector<double> S(size_t(K * V), 0.0);
      if (state_in) std::memcpy(S.data(), state_in + d.state(bi, h), sizeof(double) * size_t(K * V));
      for (int64_t t = 0; t < d.time; ++t)
        gdn2_step(S.data(), K, V, token(d, q, k, v, g, b, w, bi, t, h), d.scale, o + d.value_row(bi, t, h));
      if (state_out) std::memcpy(state_out + d.state(bi, h), S.data(), sizeof(double) * size_t(K * V));
    }
}

void gated_delta_rule2_reference_backward(const GatedDelta2Dims& d, const double* dout, const double* q,
                                          const double* k, const double* v, const double* g, const double* b,
                                          const double* w, const double* state_in, const double* dstate_out, double* dq,
                                          double* dk, double* dv, double* dg, double* db, double* dw,
                                          double* dstate_in) {
  const int64_t K = d.key_dim, V = d.value_dim, KV = K * V;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bi = 0; bi < d.batch; ++bi)
    for (int64_t h = 0; h < d.heads; ++h) {
      // states[t] = S_t for t = 0..T (S_0 the initial state).
      std::vector<double> states(size_t((d.time + 1) * KV), 0.0);
      if (state_in) std::memcpy(states.data(), state_in + d.state(bi, h), sizeof(double) * size_t(KV));
      for (int64_t t = 0; t < d.time; ++t) {
        std::memcpy(&states[size_t((t + 1) * KV)], &states[size_t(t * KV)], sizeof(double) * size_t(KV));
        gdn2_step(&states[size_t((t + 1) * KV)], K, V, token(d, q, k, v, g, b, w, bi, t, h), d.scale,
                  static_cast<double*>(nullptr));
      }
      std::vector<double> dS(size_t(KV), 0.0), work;
      if (dstate_out) std::memcpy(dS.data(), dstate_out + d.state(bi, h), sizeof(double) * size_t(KV));
      for (int64_t t = d.time - 1; t >= 0; --t) {
        const int64_t kr = d.key_row(bi, t, h), vr = d.value_row(bi, t, h);
        gdn2_step_backward(dS.data(), &states[size_t(t * KV)], K, V, token(d, q, k, v, g, b, w, bi, t, h), d.scale,
                           dout + vr, dq + kr, dk + kr, dv + vr, dg + kr, db + kr, dw + vr, work);
      }
      if (dstate_in) std::memcpy(dstate_in + d.state(bi, h), dS.data(), sizeof(double) * size_t(KV));
    }
}

}  // namespace primer::ops::cpu
