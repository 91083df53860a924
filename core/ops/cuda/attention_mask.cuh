// Which (query, key) pairs the attention kernels visit: the causal / sliding-window mask in local row indices,
// the key range a query tile needs, the query range a key tile feeds, and whether a tile needs no mask at all.
#pragma once
#include <cstdint>

#include "core/ops/cuda/attention.h"

namespace primer::ops::cuda_ops::attn {

// The mask within one tile, in int32 offsets from its corner (q0, k0): key k0 + dk is visible to query q0 + dq iff
// dq < queries, dk < keys and lo < rel + dk - dq <= hi. Edge tiles then cost a few integer operations per element.
struct TileMask {
  int rel, hi, lo, queries, keys;
  __device__ __forceinline__ bool hidden(int dq, int dk) const {
    const int off = rel + dk - dq;
    return dq >= queries || dk >= keys || off > hi || off <= lo;
  }
};

// Key j is visible to query i iff j <= i + diag (causal) and j > i + diag - window (window > 0), where
// diag = q_offset - k_offset turns global positions into local row indices.
struct Mask {
  int Tq, Tk;
  bool causal;
  int64_t window, diag;

  static Mask of(const AttentionDims& d) { return {int(d.Tq), int(d.Tk), d.causal, d.window, d.q_offset - d.k_offset}; }

  __device__ __forceinline__ bool visible(int i, int j) const {
    if (i >= Tq || j >= Tk) return false;
    if (!causal) return true;
    const int64_t last = i + diag;
    return j <= last && (window == 0 || j > last - window);
  }
  // The mask of the tile whose corner is (q0, k0); offsets within a tile stay far below the clamp.
  __device__ __forceinline__ TileMask tile(int q0, int k0) const {
    constexpr int64_t kFar = 1 << 30;
    const auto clamp = [](int64_t x) { return int(x < -kFar ? -kFar : x > kFar ? kFar : x); };
    const int hi = causal ? clamp(diag) : int(kFar);
    const int lo = causal && window > 0 ? clamp(diag - window) : -int(kFar);
    return {k0 - q0, hi, lo, Tq - q0, Tk - k0};
  }
  // True when every pair of queries [m0, m0 + rows) and keys [n0, n0 + cols) is visible and in range.
  __device__ __forceinline__ bool tile_fully_visible(int m0, int rows, int n0, int cols) const {
    if (m0 + rows > Tq || n0 + cols > Tk) return false;
    if (!causal) return true;
    return n0 + cols - 1 <= m0 + diag && (window == 0 || n0 > m0 + rows - 1 + diag - window);
  }
  // Keys [*lo, *hi) that queries [m0, m1) can see (empty when *hi <= *lo); m1 > m0.
  __device__ __forceinline__ void key_range(int m0, int m1, int* lo, int* hi) const {
    int64_t l = 0, h = Tk;
    if (causal) {
      h = h < m1 + diag ? h : m1 + diag;  // last visible key of row m1 - 1 is m1 - 1 + diag
      if (window > 0) l = m0 + diag - window + 1 > 0 ? m0 + diag - window + 1 : 0;
    }
    *lo = int(l);
    *hi = int(h > l ? h : l);
  }
  // Queries [*lo, *hi) that can see some key of [n0, n1); n1 > n0.
  __device__ __forceinline__ void query_range(int n0, int n1, int* lo, int* hi) const {
    int64_t l = 0, h = Tq;
    if (causal) {
      l = n0 - diag > 0 ? n0 - diag : 0;
      if (window > 0 && n1 - 1 - diag + window < h) h = n1 - 1 - diag + window;
    }
    l = l < Tq ? l : Tq;
    *lo = int(l);
    *hi = int(h > l ? h : l);
  }
};

}  // namespace primer::ops::cuda_ops::attn
