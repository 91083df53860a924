// Ring attention (Liu et al., "Ring Attention with Blockwise Transformers"; zhuzilin/ring-flash-attention
// ring_flash_attn/ring_flash_attn.py and zigzag_ring_flash_attn.py): the packed K/V of every rank travels once
// around the ring in P−1 send_recv steps, the next block's transfer in flight while the current one is computed.
// Each (local query chunk, held key chunk) block that any mask leaves visible is one ops::attention call over its
// visible rows and keys; the partial results merge by log-sum-exp in the accumulation dtype.
//
// Backward: the flash-attention decomposition. With the merged forward's final out and lse, each block's
// ops::attention_backward gives exactly that block's share of dq, dk and dv (P = exp(S − lse) and
// D = rowsum(dout·out) are the whole row's). K/V go around the ring again; a dK/dV accumulator travels with each
// block, gathers every rank's contribution and arrives back at its owner after the P-th hop.
#include <vector>

#include "core/check.h"
#include "core/ops/elementwise.h"
#include "parallel/sp/attention_blocks.h"
#include "parallel/sp/attention_modes.h"

namespace primer::parallel::sp {
namespace {

// One visible block: local query chunk `q_slot` against chunk `k_slot` of the K/V held at a step.
struct Block {
  int64_t q_slot = 0, k_slot = 0;
  VisibleBlock span;  // global rows and keys
};

struct RingGeometry {
  int64_t ranks = 1, rank = 0, slots = 1, tc = 0;
  SequenceLayout layout = SequenceLayout::Contiguous;

  int64_t start(int64_t owner, int64_t slot) const { return chunk_index(owner, slot, ranks, layout) * tc; }
  // Local row of global position p in `owner`'s chunk `slot`.
  int64_t local(int64_t owner, int64_t slot, int64_t p) const { return slot * tc + p - start(owner, slot); }

  // The visible blocks of this rank's queries against the chunks of `owner`, diagonal blocks first: under a
  // causal mask only a diagonal block covers every row of its query chunk, and the first block merged into a
  // chunk must (merge_partial needs a finite running lse on every row it updates).
  std::vector<Block> blocks(int64_t owner, const ops::AttentionOptions& options) const {
    std::vector<Block> diagonal, rest;
    for (int64_t i = 0; i < slots; ++i)
      for (int64_t j = 0; j < slots; ++j) {
        const int64_t qs = start(rank, i), ks = start(owner, j);
        const VisibleBlock b = visible_block({qs, qs + tc}, {ks, ks + tc}, options);
        if (b.empty()) continue;
        (qs == ks ? diagonal : rest).push_back({i, j, b});
      }
    diagonal.insert(diagonal.end(), rest.begin(), rest.end());
    return diagonal;
  }
};

int64_t next_rank(const RingGeometry& g) { return (g.rank + 1) % g.ranks; }
int64_t prev_rank(const RingGeometry& g) { return (g.rank + g.ranks - 1) % g.ranks; }
// The rank whose K/V this rank holds at ring step s (blocks move to the next rank each step).
int64_t owner_at(const RingGeometry& g, int64_t step) { return (g.rank - step + g.ranks) % g.ranks; }

}  // namespace

AttentionForward ring_attention(Communicator& sp, SequenceLayout layout, const Tensor& q, const Tensor& k,
                                const Tensor& v, const ops::AttentionOptions& options) {
  RingGeometry g;
  g.ranks = sp.size();
  g.rank = sp.rank();
  g.layout = layout;
  g.slots = sequence_chunks(g.ranks, layout) / g.ranks;
  g.tc = q.size(1) / g.slots;
  const DType acc = accumulate_dtype(q.dtype());
  const Tensor kv = pack_kv(k, v);

  Tensor out_acc = Tensor::empty(q.shape(), acc, q.device());
  Tensor lse = Tensor::empty({q.size(0), q.size(2), q.size(1)}, acc, q.device());
  std::vector<bool> started(size_t(g.slots), false);
  Tensor held = kv;
  for (int64_t step = 0; step < g.ranks; ++step) {
    Work transfer;
    Tensor incoming;
    if (step + 1 < g.ranks) {
      incoming = Tensor::empty(kv.shape(), kv.dtype(), kv.device());
      transfer = sp.send_recv_async(held, int(next_rank(g)), incoming, int(prev_rank(g)), "sp-attention ring kv");
    }
    const int64_t owner = owner_at(g, step);
    for (const Block& b : g.blocks(owner, options)) {
      const int64_t r0 = g.local(g.rank, b.q_slot, b.span.rows.begin), r1 = r0 + b.span.rows.size();
      const int64_t k0 = g.local(owner, b.k_slot, b.span.keys.begin), k1 = k0 + b.span.keys.size();
      Tensor block_lse;
      const Tensor block_out =
          ops::attention(q.slice(1, r0, r1), packed_k(held).slice(1, k0, k1), packed_v(held).slice(1, k0, k1),
                         at_offsets(options, b.span.rows.begin, b.span.keys.begin), &block_lse);
      if (!started[size_t(b.q_slot)]) {
        PRIMER_CHECK(b.span.rows.size() == g.tc, "ring attention: the first block of a query chunk must cover it");
        out_acc.slice(1, r0, r1).copy_from(block_out);
        lse.slice(2, r0, r1).copy_from(block_lse);
        started[size_t(b.q_slot)] = true;
      } else {
        merge_partial(out_acc.slice(1, r0, r1), lse.slice(2, r0, r1), block_out, block_lse);
      }
    }
    if (transfer.pending()) {
      transfer.wait();
      held = incoming;
    }
  }
  for (int64_t i = 0; i < g.slots; ++i)
    PRIMER_CHECK(started[size_t(i)], "ring attention: query chunk {} saw no key", i);

  AttentionForward result;
  result.out = out_acc.to(q.dtype());
  result.backward = [&sp, g, q, kv, out = result.out, lse, options, acc](const Tensor& dout) {
    const int64_t hkv = kv.size(2) / 2;
    Tensor dq_acc = Tensor::zeros(q.shape(), acc, q.device());
    Tensor held = kv;
    Tensor dkv_incoming;  // the accumulator of the block held next, from the previous rank
    Work dkv_transfer;
    for (int64_t step = 0; step < g.ranks; ++step) {
      Work transfer;
      Tensor incoming;
      if (step + 1 < g.ranks) {
        incoming = Tensor::empty(kv.shape(), kv.dtype(), kv.device());
        transfer =
            sp.send_recv_async(held, int(next_rank(g)), incoming, int(prev_rank(g)), "sp-attention ring kv (backward)");
      }
      const int64_t owner = owner_at(g, step);
      // This rank's contribution to the held block's dK/dV; the travelling sum is added after the compute so
      // that its transfer overlaps this step's blocks.
      Tensor dkv = Tensor::zeros(kv.shape(), acc, kv.device());
      for (const Block& b : g.blocks(owner, options)) {
        const int64_t r0 = g.local(g.rank, b.q_slot, b.span.rows.begin), r1 = r0 + b.span.rows.size();
        const int64_t k0 = g.local(owner, b.k_slot, b.span.keys.begin), k1 = k0 + b.span.keys.size();
        Tensor dq_b, dk_b, dv_b;
        ops::attention_backward(dout.slice(1, r0, r1), q.slice(1, r0, r1), packed_k(held).slice(1, k0, k1),
                                packed_v(held).slice(1, k0, k1), out.slice(1, r0, r1), lse.slice(2, r0, r1),
                                at_offsets(options, b.span.rows.begin, b.span.keys.begin), &dq_b, &dk_b, &dv_b);
        add_into(dq_acc.slice(1, r0, r1), dq_b);
        add_into(dkv.slice(2, 0, hkv).slice(1, k0, k1), dk_b);
        add_into(dkv.slice(2, hkv, 2 * hkv).slice(1, k0, k1), dv_b);
      }
      if (step > 0) {
        dkv_transfer.wait();
        ops::add_(dkv, dkv_incoming);
      }
      if (g.ranks > 1) {
        // The accumulators travel in the accumulation dtype (as ring-flash-attention's fp32 dk/dv buffers):
        // rounding each hop's partial sum to bf16 would cost accuracy the single-process backward does not lose.
        dkv_incoming = Tensor::empty(kv.shape(), acc, kv.device());
        dkv_transfer =
            sp.send_recv_async(dkv, int(next_rank(g)), dkv_incoming, int(prev_rank(g)), "sp-attention ring dkv");
      } else {
        dkv_incoming = dkv;
      }
      if (transfer.pending()) {
        transfer.wait();
        held = incoming;
      }
    }
    // After P hops the accumulator that arrives is this rank's own block's.
    dkv_transfer.wait();
    return AttentionGrads{dq_acc.to(q.dtype()), packed_k(dkv_incoming).to(q.dtype()).contiguous(),
                          packed_v(dkv_incoming).to(q.dtype()).contiguous()};
  };
  return result;
}

}  // namespace primer::parallel::sp
