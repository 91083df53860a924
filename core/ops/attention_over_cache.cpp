#include "core/ops/attention_over_cache.h"

#include <algorithm>

#include "core/check.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/ops/softmax.h"

namespace primer::ops {

Tensor attention_over_cache(const Tensor& q, const Tensor& k, const Tensor& v, double scale, int64_t chunk_keys) {
  PRIMER_CHECK(
      q.dim() == 4 && q.size(0) == 1 && q.size(1) == 1 && k.dim() == 4 && k.size(0) == 1 && v.shape() == k.shape(),
      "attention_over_cache: expected one query [1, 1, Hq, Dh] and one row's keys and values [1, Tk, Hkv, Dh], "
      "got {}, {} and {}",
      q.describe(), k.describe(), v.describe());
  PRIMER_CHECK(chunk_keys > 0, "attention_over_cache: chunk_keys is {}, expected > 0", chunk_keys);
  AttentionOptions opt;
  opt.scale = scale;
  opt.causal = false;  // every cached key precedes the query
  const int64_t Tk = k.size(1), Hq = q.size(2), Dh = q.size(3);
  const int64_t chunks = Tk / chunk_keys, batched = chunks * chunk_keys, parts = chunks + (batched < Tk);
  if (parts < 2) return attention(q, k, v, opt, nullptr);

  // The whole chunks as one batch: views of the contiguous keys, and the query repeated (by doubling copies).
  const Tensor kc = k.contiguous(), vc = v.contiguous();
  const Shape chunked{chunks, chunk_keys, k.size(2), k.size(3)};
  Tensor queries = Tensor::empty({chunks, 1, Hq, Dh}, q.dtype(), q.device());
  queries.slice(0, 0, 1).copy_from(q);
  for (int64_t have = 1; have < chunks; have *= 2) {
    const int64_t n = std::min(have, chunks - have);
    queries.slice(0, have, have + n).copy_from(queries.slice(0, 0, n));
  }
  Tensor lse;
  const Tensor out =
      attention(queries, kc.slice(1, 0, batched).view(chunked), vc.slice(1, 0, batched).view(chunked), opt, &lse);
  // Every part's output and log-sum-exp side by side, in the log-sum-exp's precision (f32; f64 for f64).
  const DType acc = lse.dtype();
  const Tensor outs = Tensor::empty({parts, Hq, Dh}, acc, q.device());
  const Tensor lses = Tensor::empty({parts, Hq}, acc, q.device());
  outs.slice(0, 0, chunks).copy_from(out.view({chunks, Hq, Dh}));
  lses.slice(0, 0, chunks).copy_from(lse.view({chunks, Hq}));
  if (parts > chunks) {  // the keys after the last whole chunk
    Tensor tail_lse;
    const Tensor tail = attention(q, kc.slice(1, batched, Tk), vc.slice(1, batched, Tk), opt, &tail_lse);
    outs.slice(0, chunks, parts).copy_from(tail.view({1, Hq, Dh}));
    lses.slice(0, chunks, parts).copy_from(tail_lse.view({1, Hq}));
  }
  // out = Σ_p e^{lse_p − lse} out_p with lse = log Σ_p e^{lse_p}: the weights are a softmax over the parts.
  const Tensor weights = softmax(lses.transpose(0, 1).contiguous()).transpose(0, 1).unsqueeze(2);  // [parts, Hq, 1]
  return sum(mul(outs, weights), 0).view({1, 1, Hq, Dh}).to(q.dtype());
}

}  // namespace primer::ops
