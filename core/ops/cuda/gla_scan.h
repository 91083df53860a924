// The sequential pass of chunked GLA (internal to gla_forward.cu / gla_backward.cu): per (batch, head, 64- or 32-
// column slice of V) one block walks the chunks keeping a K × slice of a state in fp32 registers, writing it in bf16 at
// every chunk boundary. Two flavours share the kernel and may run in one launch:
//   forward  (the state S, chunks in order):   states[c] = S before chunk c;  S ← e^{G_L} S + Σ_j e^{G_L−G_j} k_j v_jᵀ
//   reverse  (its gradient dE, chunks reversed): states[c] = dE after chunk c; dE ← e^{G_L} dE + scale Σ_r e^{G_r} q_r
//   do_rᵀ
// with G the chunk's cumulative log decay and L its last row; `init` is S_0 (forward) or the gradient wrt S_T
// (reverse), null meaning zeros, and `final_state` (may be null) receives S_T or the gradient wrt S_0.
#pragma once
#include "core/ops/gla_dims.h"

namespace primer::ops::cuda_ops {

struct GlaScanJob {
  const void* a;       // bf16 [B, T, H, K]: k (forward) or q (reverse)
  const void* b;       // bf16 [B, T, H, V]: v (forward) or dout (reverse)
  const float* init;   // [B, H, K, V] or null
  void* states;        // bf16 [B, H, chunks, K, V]
  float* final_state;  // [B, H, K, V] or null
  bool reverse;
  // A precise launch (one job sets either): a precise a's residual (GlaQuery in gla.h), bf16 like a, entering the
  // update as a second product; and where the states' own residuals go. Either may be null.
  const void* a_lo = nullptr;
  void* states_lo = nullptr;
};

// Runs `count` (1 or 2) jobs over the same g [B, T, H] in one launch. value_slice: the value columns per block, 64
// or 32 (twice the blocks, for few heads and sequences); 0: 32 when 64 would leave half the SMs idle, else 64.
void gla_state_scans(const GlaDims& d, const float* g, float scale, const GlaScanJob* jobs, int count,
                     int value_slice = 0);

}  // namespace primer::ops::cuda_ops
