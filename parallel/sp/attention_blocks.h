// The pieces sequence-parallel attention is assembled from: which part of a (query chunk, key chunk) block any
// mask leaves visible, partial results merged by their log-sum-exp, and gradient accumulation into views.
// Positions here are global (the whole sequence's), as ops::AttentionOptions' q_offset / k_offset take them.
#pragma once
#include <cstdint>

#include "core/ops/attention.h"
#include "core/tensor.h"

namespace primer::parallel::sp {

struct Span {
  int64_t begin = 0, end = 0;  // [begin, end)
  int64_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return end <= begin; }
};

// The query rows of `q` that see at least one key of `k` under the causal mask and window, and the keys of `k`
// that any of those rows sees. Every row of `rows` sees a key of `keys`, so a block call over them returns a
// finite log-sum-exp on every row. Empty rows: the block is fully masked (skip it).
struct VisibleBlock {
  Span rows, keys;
  bool empty() const { return rows.empty() || keys.empty(); }
};
VisibleBlock visible_block(Span q, Span k, const ops::AttentionOptions& options);

// options with the block's global offsets.
ops::AttentionOptions at_offsets(const ops::AttentionOptions& options, int64_t q_offset, int64_t k_offset);

// Where partial outputs and gradients accumulate: f64 beside f64 inputs, else f32 (also the dtype of the lse).
DType accumulate_dtype(DType dtype);

// dst += src for any view dst (src converted to dst's dtype).
void add_into(const Tensor& dst, const Tensor& src);

// Merges a block's partial attention into the running one, in place, row by row (ops::lse_merge):
//   lse' = log(e^lse + e^lse_b),  out' = e^{lse−lse'}·out + e^{lse_b−lse'}·out_b
// written as lse' = lse + softplus(d), weights sigmoid(−d) and sigmoid(d) with d = lse_b − lse, which never
// overflows (the formulation of zhuzilin/ring-flash-attention ring_flash_attn/utils.py, `_update_out_and_lse`).
// out [B, n, H, Dh] and lse [B, H, n] are views of the accumulators (accumulate_dtype); block_out / block_lse
// come from ops::attention over the same n rows, all finite (visible_block's rows).
void merge_partial(const Tensor& out, const Tensor& lse, const Tensor& block_out, const Tensor& block_lse);

// k, v [B, T, Hkv, Dh] packed along the heads as [B, T, 2·Hkv, Dh] (one message per exchange), and back.
Tensor pack_kv(const Tensor& k, const Tensor& v);
inline Tensor packed_k(const Tensor& kv) { return kv.slice(2, 0, kv.size(2) / 2); }
inline Tensor packed_v(const Tensor& kv) { return kv.slice(2, kv.size(2) / 2, kv.size(2)); }

}  // namespace primer::parallel::sp
