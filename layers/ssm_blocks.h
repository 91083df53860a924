// Building blocks the SSM mixers (Mamba-2, Gated DeltaNet, Gated KalmaNet) share, composed from differentiable
// ops so that each has its gradient without new kernels: the short convolution with the reference's [C, 1, K]
// weights, GQA head expansion, L2 normalisation, the Mamba-2-style decay gate and the gated output RMSNorm.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "core/autograd/variable.h"
#include "core/parameters.h"
#include "layers/model_config.h"
#include "layers/mixer.h"
#include "layers/state_carry.h"

namespace primer::layers {

// The q, k and v projections of a linear-attention mixer with GQA (GDN, KZLA, KLA, GDN2): checks that
// num_attention_heads and num_key_value_heads divide the larger of the two (the mixer's heads), registers
// <prefix>.q_proj [Hq·D, d], k_proj and v_proj [Hk·D, d] (normal init) and returns their output channels.
std::array<int64_t, 3> add_qkv_projections(ParameterRegistry& params, const std::string& prefix, const ModelConfig& c);

// Depthwise causal conv over time of x [B, T, C] with weight [C, 1, K] (the Hugging Face layout), optional bias
// [C] (null: none) and SiLU, carrying the last K−1 inputs: state_in [B, C, K−1] (null: zeros), *state_out. With
// l2_head_dim > 0 each head of that many output channels is then L2-normalised (ag::causal_conv1d_l2, l2_eps inside
// the root).
ag::Var short_conv(const ag::Var& x, const ag::Var& weight, const ag::Var& bias, bool silu, const ag::Var& state_in,
                   ag::Var* state_out, int64_t l2_head_dim = 0, double l2_eps = 0);

// A projected branch y [B, T, heads·D] → [B, T, heads, D]: silu(short_conv(y)) with conv_weight [C, 1, K] (bias
// optional), its state carried at conv `slot` of `carry`; with no conv_weight, silu(y) when silu_without_conv, else
// y unchanged. With l2_eps ≥ 0 each head is then L2-normalised (l2_normalize; in the conv's pass where there is a
// conv). Under A2A (carry.to_heads) → [B, T_whole, heads/P, D], this rank's heads.
ag::Var conv_heads(const ag::Var& y, const ag::Var& conv_weight, const ag::Var& conv_bias, bool silu_without_conv,
                   int64_t heads, int64_t head_dim, size_t slot, const StateCarry& carry, double l2_eps = -1);

// The P2P summary of a scalar-decay recurrence S_t = exp(g_t)·S_{t−1} + k_t v_tᵀ over chunk rows (k [R, T, H, K],
// v [R, T, H, V], g [R, T, H]): its final state from zero (through the GLA kernels) and the log decay Σ_t g_t.
ChunkSummary scalar_decay_summary(const ag::Var& k, const ag::Var& v, const ag::Var& g);

// Per head, the rows of `rows` [R, T, H, K] times the state S [R, H, K, V]: [R, T, H, V] in rows' dtype (the product
// in S's dtype). Under P2P the delta rule's output from an incoming state S_in is its output from zero plus this
// readout of scale·A_{1:t}ᵀ q_t (the recurrence is linear in the state).
ag::Var state_readout(const ag::Var& rows, const ag::Var& S);

// A delta-rule core: o [R, T, H, V] from values [R, T, H, V] and the state entering (null: zeros), writing the final
// state to *state_out when non-null. q, k and the gates are bound inside.
using LinearStateCore = std::function<ag::Var(const ag::Var& values, const ag::Var& state_in, ag::Var* state_out)>;

// The output of a core whose recurrence is linear in (state, values) (GDN, KZLA, GDN-2), on v [R, T, H, K] (value
// dim = key dim K) with the recurrent state at `slot` of `carry`. Under P2P the chunk runs from zero once (its output
// y₀ and final state E) and once on zero values from the identity (the transition M = A_{1:T}, and q̃_t =
// scale·A_{1:t}ᵀq_t): with the incoming state S_in composed from the ranks' (M, E), the output is y₀ + q̃·S_in, exact
// because the recurrence is linear — two passes where running again from S_in would take three (flash-linear-
// attention's context parallelism packs [E | M]). Otherwise one pass from the carried state.
ag::Var linear_state_output(const LinearStateCore& core, const ag::Var& v, const StateCarry& carry, size_t slot);

// [R, H, K, K] identity matrices: the initial state whose final state is a recurrence's total transition.
Tensor identity_states(int64_t R, int64_t H, int64_t K, DType dtype, Device device);

// x [B, T, Hk, D] → [B, T, Hk·groups, D], each head repeated `groups` times in place (repeat_interleave, as
// Hugging Face's repeat_kv): kv head j serves expanded heads j·groups … j·groups + groups − 1.
ag::Var expand_heads(const ag::Var& x, int64_t groups);

// x / sqrt(Σ x² + eps) over the last dimension (eps inside the root, as fla's in-kernel L2 norm).
ag::Var l2_normalize(const ag::Var& x, double eps);

// Norm then gate, per head (fla's FusedRMSNormGated with swish): RMSNorm_D(o) · w ⊙ silu(gate);
// o and gate [..., D] of one dtype, w [D].
ag::Var gated_rmsnorm(const ag::Var& o, const ag::Var& w, const ag::Var& gate, double eps);

// The output stage of GDN and GKA: per-head RMSNorm of o [B, T, H, D] (then the SiLU gate g_proj(x) when g_proj is
// given), heads merged and projected by o_proj.
ag::Var norm_gate_project(const ag::Var& o, const ag::Var& x, const ag::Var& o_norm, const ag::Var* g_proj,
                          const ag::Var& o_proj, double eps);

}  // namespace primer::layers
