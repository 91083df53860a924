// DeepSpeed-Ulysses (Jacobs et al., "DeepSpeed Ulysses: System Optimizations for Enabling Training of Extreme Long
// Sequence Transformer Models"): one all_to_all turns [B, T_local, H, Dh] (every head, local tokens) into
// [B, T, H/P, Dh] (every token, a group of H/P heads), attention runs unmodified on the whole sequence, and a
// second all_to_all brings the output back. Rank j takes query heads [j·Hq/P, (j+1)·Hq/P) and kv heads
// [j·Hkv/P, (j+1)·Hkv/P), which are exactly the kv heads of its query heads under GQA. The backward mirrors it.
#include "core/check.h"
#include "parallel/sp/attention_blocks.h"
#include "parallel/sp/attention_modes.h"
#include "parallel/sp/head_exchange.h"
#include "parallel/sp/sequence_order.h"

namespace primer::parallel::sp {
AttentionForward ulysses_attention(Communicator& sp, SequenceLayout layout, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const ops::AttentionOptions& options) {
  const int64_t ranks = sp.size();
  const int64_t hq = q.size(2) / ranks, hkv = k.size(2) / ranks, hs = hq + 2 * hkv;
  // q, k, v head groups side by side in one message: [P, B, T_local, hq + 2·hkv, Dh].
  Tensor send = Tensor::empty({ranks, q.size(0), q.size(1), hs, q.size(3)}, q.dtype(), q.device());
  send.slice(3, 0, hq).copy_from(by_head_group(q, ranks));
  send.slice(3, hq, hq + hkv).copy_from(by_head_group(k, ranks));
  send.slice(3, hq + hkv, hs).copy_from(by_head_group(v, ranks));
  Tensor recv = Tensor::empty(send.shape(), send.dtype(), send.device());
  sp.all_to_all(send, recv, "sp-attention ulysses qkv");
  const Tensor full = to_sequence_order(recv, layout);  // [B, T, hs, Dh]
  const Tensor qf = full.slice(2, 0, hq).contiguous(), kf = full.slice(2, hq, hq + hkv).contiguous(),
               vf = full.slice(2, hq + hkv, hs).contiguous();

  Tensor lse;
  const Tensor out_full = ops::attention(qf, kf, vf, options, &lse);

  AttentionForward result;
  result.out = gather_heads(sp, layout, out_full, "sp-attention ulysses out");
  result.backward = [&sp, layout, qf, kf, vf, out_full, lse, options, ranks, hq, hkv, hs](const Tensor& dout) {
    const Tensor dout_full = scatter_heads(sp, layout, dout, "sp-attention ulysses dout");  // [B, T, hq, Dh]
    Tensor dq, dk, dv;
    ops::attention_backward(dout_full, qf, kf, vf, out_full, lse, options, &dq, &dk, &dv);
    // Each gradient is whole on the rank that computed it: the exchange needs no sum, so q's dtype is exact.
    Tensor grads = Tensor::empty({qf.size(0), qf.size(1), hs, qf.size(3)}, qf.dtype(), qf.device());
    grads.slice(2, 0, hq).copy_from(dq);
    grads.slice(2, hq, hq + hkv).copy_from(dk);
    grads.slice(2, hq + hkv, hs).copy_from(dv);
    const Tensor gsend = to_rank_order(grads, ranks, layout);  // [P, B, T_local, hs, Dh]
    Tensor grecv = Tensor::empty(gsend.shape(), gsend.dtype(), gsend.device());
    sp.all_to_all(gsend, grecv, "sp-attention ulysses dqkv");
    return AttentionGrads{from_head_groups(grecv.slice(3, 0, hq)), from_head_groups(grecv.slice(3, hq, hq + hkv)),
                          from_head_groups(grecv.slice(3, hq + hkv, hs))};
  };
  return result;
}

}  // namespace primer::parallel::sp
