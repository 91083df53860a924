// The hybrid side of a model's shape: which sequence mixer each layer uses (the hybrid pattern of the Priming
// reference implementation) and each SSM mixer's options, with the reference's names and defaults
// (awslabs/hybrid-model-factory), so recipes and checkpoints carry over.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace primer {

// One layer's mixer, from the pattern token that names it. Fused Stage-0/1 tokens ("*DA", "GKA*", ...) are
// parsed by the Priming stages, not here.
enum class MixerKind {
  Attention,                // "*"   causal softmax attention (GQA, QK-norm, RoPE)
  SlidingWindow,            // "SWA" sliding-window attention (window from SwaConfig)
  Mamba2,                   // "M2"
  GatedDeltaNet,            // "GDN"
  GatedKalmaNet,            // "GKA"
  KaczmarzLinearAttention,  // "KZLA" Gated DeltaNet with the Kaczmarz step β = η/(‖k‖² + ε) on raw keys
  KalmanLinearAttention,    // "KLA"  per-element Kalman filters in information form
  GatedDeltaNet2,           // "GDN2" channel-wise decay, erase gate on keys, write gate on values (CPU only so far)
  BMojoF,                   // "BMF"  B'MOJO-F: an SSM whose outputs are attended beside a sliding window
};

MixerKind parse_mixer_token(const std::string& token, const std::string& source);
const char* mixer_token(MixerKind kind);
// The module name that holds the mixer's parameters in a layer: self_attn, swa, mamba, gdn, gka.
const char* mixer_module(MixerKind kind);
bool is_ssm(MixerKind kind);

// "*-GKA-*-GKA" → one kind per layer. Errors name `source` and the offending token.
std::vector<MixerKind> parse_hybrid_pattern(const std::string& pattern, const std::string& source);
std::string format_hybrid_pattern(const std::vector<MixerKind>& layers);

// Stage 0/1 fused teacher-student patterns: "*DA" (attention run on both streams) and "X*" (student mixer X next
// to the frozen teacher attention), e.g. "*DA-GKA*-*DA-GKA*". A pattern is either all fused or all plain.
struct HybridPattern {
  std::vector<MixerKind> layers;  // the student's mixers ("*DA" → Attention, "GKA*" → GatedKalmaNet)
  bool fused = false;
};
HybridPattern parse_any_hybrid_pattern(const std::string& pattern, const std::string& source);
std::string format_hybrid_pattern(const HybridPattern& pattern);  // fused tokens when fused

// Gated KalmaNet (gka_config). Head counts default to the Transformer's (num_q_heads = num_attention_heads,
// num_k_heads = num_v_heads = num_key_value_heads, head_dim = the attention head_dim).
struct GkaConfig {
  bool use_alpha_connection = true;
  bool use_v_conv = true;
  bool use_forgetting_gate = true;
  bool gla_rescale = true;  // readout scale head_dim^-1/2
  bool bp_lambda = true;    // backpropagate through λ_t = ridge_strength·‖H_t‖_F
  int64_t num_iter = 30;    // Chebyshev iterations (the test-time compute knob; may change at run time)
  double ridge_strength = 0.02;
  bool precise_iterate = true;  // CUDA bf16: the precise mode (hi + lo iterate, f32 vectors; GkaMixer::forward)
  bool iterate_fp16 = false;    // CUDA (Hopper) bf16 precise mode: the iteration's operands in fp16 (ChebyshevOptions)
  bool use_gate = true;         // output gate silu(g_proj x) after the output RMSNorm
  int64_t conv_size = 4;
  double norm_eps = 1e-6;
  bool use_forgetting_gate_kk = true;  // the same decay on H as on the GLA state
  bool use_beta_gate = true;
  int64_t chunk_size = 64;
  std::optional<int64_t> kv_proj_rank;  // Adaptive GQA (low-rank K/V expansion); none = plain repetition
  bool kv_learnable_residual = false;
  bool operator==(const GkaConfig&) const = default;
};

// Gated DeltaNet (gdn_config).
struct GdnConfig {
  bool use_gate = true;
  bool use_short_conv = true;
  bool allow_neg_eigval = false;  // β ∈ (0, 2) instead of (0, 1)
  int64_t conv_size = 4;
  bool conv_bias = false;
  double norm_eps = 1e-5;
  std::optional<int64_t> kv_proj_rank;
  bool kv_learnable_residual = false;
  bool operator==(const GdnConfig&) const = default;
};

// Kaczmarz linear attention (kzla_config) takes Gated DeltaNet's options: the two layers differ only in the core's
// step size and in leaving the keys unnormalised.
using KzlaConfig = GdnConfig;

// Kalman linear attention (kla_config). Heads as GDN's; each head's state is N = head_dim slots × head_dim channels.
struct KlaConfig {
  bool use_gate = true;        // output gate silu(g_proj x) after the output RMSNorm
  bool use_short_conv = true;  // short convolutions (and SiLU) on q, k, v
  int64_t conv_size = 4;
  double min_precision = 1e-4;       // Λᵛ = softplus(lv_proj x) + min_precision
  double process_noise_init = 0.01;  // p (the OU diffusion σ) at init: p̄ = p²(1 − ā²)/(2a)
  double norm_eps = 1e-5;
  bool operator==(const KlaConfig&) const = default;
};

// Gated DeltaNet-2 (gdn2_config). Heads as GDN's; the decay's low-rank projection has rank head_dim (the authors'
// d → d_v → H·d_k).
struct Gdn2Config {
  bool use_gate = true;           // output gate silu(g_proj x) after the output RMSNorm
  bool use_short_conv = true;     // short convolutions (and SiLU) on q, k, v
  bool allow_neg_eigval = false;  // erase gate b = 2σ(·) ∈ (0, 2); the write gate stays in (0, 1) (KDA: both)
  // Kimi Delta Attention (KDA): one gate per head for erase and write, b = w = β = σ(b_proj x) with b_proj [H, d]
  // (no w_proj), the rule S = (I − β k kᵀ) Diag(α) S + β k vᵀ; allow_neg_eigval doubles β (both gates), as KDA does.
  bool kda_gates = false;
  int64_t conv_size = 4;
  bool conv_bias = false;
  double norm_eps = 1e-5;
  bool operator==(const Gdn2Config&) const = default;
};

// Mamba-2 in the Mamba-in-Llama mapping (mamba2_config): d_inner = Hq·D, d_xb = Hkv·D, d_state = head_dim,
// ngroups = nheads = Hq, expand 1, d_conv 4, conv bias, gated RMSNorm (gate then norm) with group size D.
struct Mamba2Config {
  bool use_qk_norm = true;   // per-head RMSNorm of B (keys) and C (queries) before the conv
  bool use_pos_emb = false;  // RoPE on B and C
  int64_t conv_size = 4;
  double norm_eps = 1e-5;
  bool operator==(const Mamba2Config&) const = default;
};

// B'MOJO-F (bmojo_config): one SSM (ssm_mixer, with that mixer's own options) and window attention over the last
// window_size tokens and over the SSM's outputs of the window_size tokens before them.
struct BmojoConfig {
  int64_t window_size = 2048;
  bool tie_attn_weights = true;      // the fading path reuses q/k/v_proj and q/k_norm (else q/k/v_proj_, q/k_norm_)
  std::string ssm_mixer = "mamba2";  // mamba2 | gdn | gated_deltanet | gka | gated_kalmanet
  bool operator==(const BmojoConfig&) const = default;
};

struct SwaConfig {
  int64_t window_size = 0;  // required when the pattern has SWA
  bool operator==(const SwaConfig&) const = default;
};

}  // namespace primer
