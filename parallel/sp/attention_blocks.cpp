#include "parallel/sp/attention_blocks.h"

#include <algorithm>

#include "core/check.h"
#include "core/ops/elementwise.h"
#include "core/ops/lse_merge.h"

namespace primer::parallel::sp {

VisibleBlock visible_block(Span q, Span k, const ops::AttentionOptions& o) {
  if (!o.causal) return {q, k};
  // Key j is visible to query p iff j <= p and, with a window w, j > p − w.
  VisibleBlock b{q, k};
  b.rows.begin = std::max(q.begin, k.begin);                             // some j <= p
  if (o.window > 0) b.rows.end = std::min(q.end, k.end - 1 + o.window);  // some j > p − w
  if (b.rows.empty()) return {};
  b.keys.end = std::min(k.end, b.rows.end);                                         // j <= the last row
  if (o.window > 0) b.keys.begin = std::max(k.begin, b.rows.begin - o.window + 1);  // j > the first row − w
  if (b.keys.empty()) return {};
  return b;
}

ops::AttentionOptions at_offsets(const ops::AttentionOptions& options, int64_t q_offset, int64_t k_offset) {
  ops::AttentionOptions o = options;
  o.q_offset = q_offset;
  o.k_offset = k_offset;
  return o;
}

DType accumulate_dtype(DType dtype) { return dtype == DType::F64 ? DType::F64 : DType::F32; }

void add_into(const Tensor& dst, const Tensor& src) {
  const Tensor s = src.to(dst.dtype());
  if (dst.is_contiguous())
    ops::add_(dst, s);
  else
    dst.copy_from(ops::add(dst, s));
}

void merge_partial(const Tensor& out, const Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
  Tensor merged_lse;
  out.copy_from(ops::lse_merge(out, lse, block_out.to(out.dtype()), block_lse.to(lse.dtype()), &merged_lse));
  lse.copy_from(merged_lse);
}

Tensor pack_kv(const Tensor& k, const Tensor& v) {
  PRIMER_CHECK(k.shape() == v.shape() && k.dim() == 4, "pack_kv: k {} and v {}", k.describe(), v.describe());
  Shape shape = k.shape();
  shape[2] *= 2;
  Tensor kv = Tensor::empty(shape, k.dtype(), k.device());
  packed_k(kv).copy_from(k);
  packed_v(kv).copy_from(v);
  return kv;
}

}  // namespace primer::parallel::sp
