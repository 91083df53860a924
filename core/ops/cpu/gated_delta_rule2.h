// CPU gated delta rule-2 (core/ops/gated_delta_rule2.h): the token-by-token f64 reference (ground truth, hand-written
// backward) and the chunked UT-transform algorithm (f32/f64). Dense buffers: q, k, g, b [B, T, H, K]; v, w, o
// [B, T, H, V]; states [B, H, K, V]; nullable pointers are marked.
#pragma once
#include <cstdint>

namespace primer::ops::cpu {

struct GatedDelta2Dims {
  int64_t batch = 0, time = 0, heads = 0, key_dim = 0, value_dim = 0;
  double scale = 1.0;  // readout scale of o_t = scale · S_tᵀ q_t

  int64_t key_row(int64_t b, int64_t t, int64_t h) const { return ((b * time + t) * heads + h) * key_dim; }
  int64_t value_row(int64_t b, int64_t t, int64_t h) const { return ((b * time + t) * heads + h) * value_dim; }
  int64_t state(int64_t b, int64_t h) const { return (b * heads + h) * key_dim * value_dim; }
};

// state_in (null: zeros) and state_out may be null.
void gated_delta_rule2_reference(const GatedDelta2Dims& d, const double* q, const double* k, const double* v,
                                 const double* g, const double* b, const double* w, const double* state_in, double* o,
                                 double* state_out);
// Gradients of <dout, o> + <dstate_out, S_T>; state_in, dstate_out (zero) and dstate_in may be null.
void gated_delta_rule2_reference_backward(const GatedDelta2Dims& d, const double* dout, const double* q,
                                          const double* k, const double* v, const double* g, const double* b,
                                          const double* w, const double* state_in, const double* dstate_out, double* dq,
                                          double* dk, double* dv, double* dg, double* db, double* dw,
                                          double* dstate_in);

// The chunked forward (chunks of 64 tokens, the last one partial); same contract as the reference. The backward is
// chunked too (the paper's App. B per-chunk VJP in the ratio form): it recomputes each chunk's UT quantities and
// start state with the forward, then walks the chunks in reverse (gated_delta_rule2.cpp has the formulas).
template <class T> void gated_delta_rule2_chunked(const GatedDelta2Dims& d, const T* q, const T* k, const T* v,
                                                  const T* g, const T* b, const T* w, const T* state_in, T* o,
                                                  T* state_out);
template <class T> void gated_delta_rule2_chunked_backward(const GatedDelta2Dims& d, const T* dout, const T* q,
                                                           const T* k, const T* v, const T* g, const T* b, const T* w,
                                                           const T* state_in, const T* dstate_out, T* dq, T* dk, T* dv,
                                                           T* dg, T* db, T* dw, T* dstate_in);

}  // namespace primer::ops::cpu
