// The chunked algorithm of core/ops/gla.h on the CPU (f32/f64), the same maths the CUDA kernels run. Per (batch,
// head) and chunk of kGlaChunk tokens with cumulative log decay G_r = Σ_{s≤r} g_s inside the chunk (L its last
// row) and S the state at the chunk's start:
//   o_r   = scale · ( e^{G_r} S ᵀq_r + Σ_{j≤r} e^{G_r−G_j} (q_r·k_j) v_j )
//   S_end = e^{G_L} S + Σ_j e^{G_L−G_j} k_j v_jᵀ
// Buffers are dense; state_in, state_out, dstate_out and dstate_in may be null.
#pragma once
#include "core/ops/gla_dims.h"

namespace primer::ops::cpu {

template <class T> void gla_forward(const GlaDims& d, const T* q, const T* k, const T* v, const T* g, T scale,
                                    const T* state_in, T* o, T* state_out);

// dq, dk, dv, dg are overwritten; dstate_in (if non-null) receives the gradient wrt state_in.
template <class T> void gla_backward(const GlaDims& d, const T* dout, const T* q, const T* k, const T* v, const T* g,
                                     T scale, const T* state_in, const T* dstate_out, T* dq, T* dk, T* dv, T* dg,
                                     T* dstate_in);

}  // namespace primer::ops::cpu
