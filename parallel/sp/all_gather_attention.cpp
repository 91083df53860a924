// All-gather context parallelism (Llama 3, "The Llama 3 Herd of Models" §3.3.2): K and V of the whole sequence
// are gathered once, each local query chunk attends to the keys it can see in one call, and the backward
// computes dK/dV for the whole sequence locally and reduce-scatters their sum back to the owners. K/V are
// gathered again in the backward rather than kept, so the saved state is the local chunks only, as in ring mode.
#include "core/check.h"
#include "parallel/sp/attention_blocks.h"
#include "parallel/sp/attention_modes.h"
#include "parallel/sp/sequence_order.h"

namespace primer::parallel::sp {
namespace {

// The whole sequence's K and V packed [B, T, 2·Hkv, Dh] in sequence order.
Tensor gather_kv(Communicator& sp, SequenceLayout layout, const Tensor& kv, const char* label) {
  Shape shape = kv.shape();
  shape.insert(shape.begin(), sp.size());
  Tensor parts = Tensor::empty(shape, kv.dtype(), kv.device());
  sp.all_gather(kv, parts, label);
  return to_sequence_order(parts, layout);
}

}  // namespace

AttentionForward all_gather_attention(Communicator& sp, SequenceLayout layout, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const ops::AttentionOptions& options) {
  const int64_t ranks = sp.size(), rank = sp.rank();
  const int64_t slots = sequence_chunks(ranks, layout) / ranks;
  const int64_t tc = q.size(1) / slots, length = q.size(1) * ranks;
  const DType acc = accumulate_dtype(q.dtype());
  const Tensor kv = pack_kv(k, v);

  // Local query chunk i (rows [i·Tc, (i+1)·Tc)) and the keys any of its rows sees: one contiguous range.
  struct Chunk {
    int64_t slot;
    VisibleBlock block;
  };
  std::vector<Chunk> chunks;
  for (int64_t s = 0; s < slots; ++s) {
    const int64_t start = chunk_index(rank, s, ranks, layout) * tc;
    const VisibleBlock b = visible_block({start, start + tc}, {0, length}, options);
    PRIMER_CHECK(b.rows.begin == start && b.rows.end == start + tc, "all-gather attention: a query row sees no key");
    chunks.push_back({s, b});
  }

  const Tensor full = gather_kv(sp, layout, kv, "sp-attention all-gather kv");
  const Tensor K = packed_k(full).contiguous(), V = packed_v(full).contiguous();
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor lse = Tensor::empty({q.size(0), q.size(2), q.size(1)}, acc, q.device());
  for (const Chunk& c : chunks) {
    const Span keys = c.block.keys;
    Tensor chunk_lse;
    const Tensor o = ops::attention(q.slice(1, c.slot * tc, (c.slot + 1) * tc), K.slice(1, keys.begin, keys.end),
                                    V.slice(1, keys.begin, keys.end),
                                    at_offsets(options, c.block.rows.begin, keys.begin), &chunk_lse);
    out.slice(1, c.slot * tc, (c.slot + 1) * tc).copy_from(o);
    lse.slice(2, c.slot * tc, (c.slot + 1) * tc).copy_from(chunk_lse);
  }

  AttentionForward result;
  result.out = out;
  result.backward = [&sp, layout, q, kv, out, lse, options, chunks, tc, acc, length](const Tensor& dout) {
    const int64_t ranks = sp.size(), hkv = kv.size(2) / 2;
    const Tensor full = gather_kv(sp, layout, kv, "sp-attention all-gather kv (backward)");
    const Tensor K = packed_k(full).contiguous(), V = packed_v(full).contiguous();
    Tensor dq = Tensor::empty(q.shape(), q.dtype(), q.device());
    Tensor dkv_full = Tensor::zeros({kv.size(0), length, kv.size(2), kv.size(3)}, acc, q.device());
    for (const Chunk& c : chunks) {
      const Span keys = c.block.keys;
      const int64_t r0 = c.slot * tc, r1 = r0 + tc;
      Tensor dq_c, dk_c, dv_c;
      ops::attention_backward(dout.slice(1, r0, r1), q.slice(1, r0, r1), K.slice(1, keys.begin, keys.end),
                              V.slice(1, keys.begin, keys.end), out.slice(1, r0, r1), lse.slice(2, r0, r1),
                              at_offsets(options, c.block.rows.begin, keys.begin), &dq_c, &dk_c, &dv_c);
      dq.slice(1, r0, r1).copy_from(dq_c);
      add_into(dkv_full.slice(2, 0, hkv).slice(1, keys.begin, keys.end), dk_c);
      add_into(dkv_full.slice(2, hkv, 2 * hkv).slice(1, keys.begin, keys.end), dv_c);
    }
    // Summed over the ranks in the accumulation dtype: every rank's queries contribute to every key.
    const Tensor parts = to_rank_order(dkv_full, ranks, layout);
    Tensor own = Tensor::empty(kv.shape(), acc, kv.device());
    sp.reduce_scatter(parts, own, ReduceOp::Sum, "sp-attention reduce-scatter dkv");
    return AttentionGrads{dq, packed_k(own).to(q.dtype()).contiguous(), packed_v(own).to(q.dtype()).contiguous()};
  };
  return result;
}

}  // namespace primer::parallel::sp
