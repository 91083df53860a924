// Sizes of a gated delta rule call, shared by its CPU and CUDA implementations. Tensors are dense:
// q [B, T, H, K]; k [B, T, Hk, K]; v [B, T, Hk, V]; o [B, T, H, V]; g, beta [B, T, H]; states [B, H, K, V].
#pragma once
#include <cstdint>

namespace primer::ops {

struct GatedDeltaDims {
  int64_t batch = 0, time = 0, heads = 0, key_dim = 0, value_dim = 0;
  double scale = 1.0;  // readout scale of o_t = scale · S_tᵀ q_t
  // Hk, the heads of k and v (a divisor of H; 0: H): head h reads key/value head h / (H / Hk), grouped-query
  // attention's sharing, without the copies to every head.
  int64_t kv_heads = 0;
  int64_t kv_group() const { return kv_heads ? heads / kv_heads : 1; }
};

}  // namespace primer::ops
