// CUDA launchers for the chunked gated delta rule (compute stream, no host sync). q, k, v, o and their gradients
// are dense bf16; g, beta, the states and dg, dbeta dense f32. Head dims K = V ∈ {64, 128}. Tensor-core products
// take bf16 operands with fp32 accumulation; the running state and its gradient stay fp32 on chip. k and v have
// d.kv_heads heads (GatedDeltaDims::kv_group), but dk and dv are written for every head, [B, T, H, K|V]: the
// caller sums each group's (one head's gradient is a CTA's, and a group's heads run in different CTAs).
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

#include "core/ops/gated_delta_rule_dims.h"

namespace primer::ops::cuda_ops {

// Kernel configuration. value_block: the value columns each CTA of the sequential state passes owns (64, or 32 or
// 128 when V = 128): 128 reads each chunk's tiles once per head instead of twice, 64 runs twice as many CTAs and 32
// four times. 0: the default (gated_delta_rule_default_value_block: 32 when 64 would leave SMs idle, else 64).
struct GatedDeltaConfig {
  int value_block = 0;
  // Forward: also store what the backward would recompute (the chunk-start states and U) in a backward-sized
  // workspace (gated_delta_rule_workspace_bytes(d, true)).
  bool keep_scratch = false;
  // Backward: the workspace is such a forward's (same inputs), so the chunk prep and the recompute pass are skipped.
  bool scratch_from_forward = false;
  // Forward: the sequence's chunks in this many pieces (0: automatic, gdr::forward_pieces), each piece's state pass
  // running beside the next piece's chunk prep on a second stream. The pass runs a CTA per value block, head and
  // sequence, so at small B·H it leaves most SMs idle, which the prep then fills. The results are the same for any
  // count (the state passes between pieces in fp32).
  int forward_pieces = 0;
  // ≥ 0: k and v are raw (Kaczmarz linear attention's step, core/ops/kaczmarz_delta_rule.h): the kernels run on
  // k̂ = r·k and v̂ = r·v with r = 1/sqrt(‖k‖² + raw_key_eps) per token (rounded to bf16 once, in the chunk prep), and
  // the backward's dk, dv are the raw k's and v's: dk = r·(dk̂ − (⟨dk̂, k̂⟩ + ⟨dv̂, v̂⟩)·k̂), dv = r·dv̂ — no pass of
  // its own either way. The workspace then holds k̂, v̂ and r as well (gated_delta_rule_workspace_bytes(d, ·, true)).
  float raw_key_eps = -1.f;
  bool raw_keys() const { return raw_key_eps >= 0.f; }
};
int gated_delta_rule_default_value_block(const GatedDeltaDims& d);

// Bytes of scratch the forward (backward = false) or the backward (and a keep_scratch forward) needs.
size_t gated_delta_rule_workspace_bytes(const GatedDeltaDims& d, bool backward, bool raw_keys = false);

// One kernel of a call: launch() enqueues it on the compute stream.
struct GatedDeltaKernel {
  const char* name;
  std::function<void()> launch;
};

// The forward's kernels in order (the launcher below runs exactly these; benchmarks time them one by one).
// state_in (null: zeros) and state_out may be null.
std::vector<GatedDeltaKernel> gated_delta_rule_forward_kernels(const GatedDeltaDims& d, const void* q, const void* k,
                                                               const void* v, const float* g, const float* beta,
                                                               const float* state_in, void* o, float* state_out,
                                                               void* workspace, const GatedDeltaConfig& config = {});
void gated_delta_rule_forward(const GatedDeltaDims& d, const void* q, const void* k, const void* v, const float* g,
                              const float* beta, const float* state_in, void* o, float* state_out, void* workspace,
                              const GatedDeltaConfig& config = {});

// The backward's kernels in order; state_in, dstate_out (zero) and dstate_in may be null. Every gradient is
// overwritten.
std::vector<GatedDeltaKernel> gated_delta_rule_backward_kernels(
    const GatedDeltaDims& d, const void* dout, const void* q, const void* k, const void* v, const float* g,
    const float* beta, const float* state_in, const float* dstate_out, void* dq, void* dk, void* dv, float* dg,
    float* dbeta, float* dstate_in, void* workspace, const GatedDeltaConfig& config = {});
void gated_delta_rule_backward(const GatedDeltaDims& d, const void* dout, const void* q, const void* k, const void* v,
                               const float* g, const float* beta, const float* state_in, const float* dstate_out,
                               void* dq, void* dk, void* dv, float* dg, float* dbeta, float* dstate_in, void* workspace,
                               const GatedDeltaConfig& config = {});

}  // namespace primer::ops::cuda_ops
