// Sizes of a gated delta rule call, shared by its CPU and CUDA implementations. Tensors are dense:
// q, k [B, T, H, K]; v, o [B, T, H, V]; g, beta [B, T, H]; states [B, H, K, V].
#pragma once
#include <cstdint>

namespace primer::ops {

struct GatedDeltaDims {
  int64_t batch = 0, time = 0, heads = 0, key_dim = 0, value_dim = 0;
  double scale = 1.0;  // readout scale of o_t = scale · S_tᵀ q_t
};

}  // namespace primer::ops
